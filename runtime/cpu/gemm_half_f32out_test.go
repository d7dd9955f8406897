package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/ngen-ml/ngen/runtime"
)

// TestGemmHalfF32Out: a product of 16-bit operands with an f32 C
// (GemmArgs.F32Out: a weight gradient written straight into the f32
// gradient, compiler/f32_weight_grads.go) leaves C the f32 sums, not
// rounded to 16 bits, on oneDNN's native bfloat16 matmul and on the
// widening path, for bf16 and f16, transposed operands, beta ≠ 0, a
// batch with its own C per entry, padded leading dimensions (the padding
// untouched) and a device sharing rows between threads; a batch summed
// into one C that is not one larger product is refused.
func TestGemmHalfF32Out(t *testing.T) {
	defer func(w bool) { bf16Widen = w }(bf16Widen)
	rng := rand.New(rand.NewPCG(3, 4))
	toHalf := func(dt runtime.DType, x float64) uint16 {
		if dt == runtime.F16 {
			return f2h(x)
		}
		u := math.Float32bits(float32(x))
		return uint16((u + 0x7fff + (u>>16)&1) >> 16)
	}
	fromHalf := func(dt runtime.DType, h uint16) float64 {
		if dt == runtime.F16 {
			return h2f(h)
		}
		return float64(math.Float32frombits(uint32(h) << 16))
	}
	type shape struct{ M, N, K, batch, pad int }
	for _, threads := range []int{1, 2} {
		d, err := New(Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		for _, dt := range []runtime.DType{runtime.BF16, runtime.F16} {
			for _, widen := range []bool{false, true} {
				bf16Widen = widen
				for _, s := range []shape{{7, 5, 33, 1, 0}, {9, 6, 40, 2, 3}, {64, 31, 97, 1, 0}} {
					for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}} {
						what := fmt.Sprintf("threads %d %s widen=%v %+v trans %v", threads, dt, widen, s, tr)
						rowsA, colsA := s.M, s.K
						if tr[0] {
							rowsA, colsA = s.K, s.M
						}
						rowsB, colsB := s.K, s.N
						if tr[1] {
							rowsB, colsB = s.N, s.K
						}
						lda, ldb, ldc := colsA+s.pad, colsB+s.pad, s.N+s.pad
						sa, sb, sc := rowsA*lda, rowsB*ldb, s.M*ldc
						a, b := make([]uint16, s.batch*sa), make([]uint16, s.batch*sb)
						for i := range a {
							a[i] = toHalf(dt, rng.NormFloat64())
						}
						for i := range b {
							b[i] = toHalf(dt, rng.NormFloat64())
						}
						c := make([]float32, s.batch*sc)
						for i := range c {
							c[i] = float32(rng.NormFloat64())
						}
						g := runtime.GemmArgs{DType: dt, F32Out: true, M: s.M, N: s.N, K: s.K, Alpha: 0.5, Beta: 2,
							TransA: runtime.Transpose(tr[0]), TransB: runtime.Transpose(tr[1]), LDA: lda, LDB: ldb, LDC: ldc,
							Batch: s.batch, StrideA: sa, StrideB: sb, StrideC: sc}
						g.A, g.B, g.C = upload(t, d, a), upload(t, d, b), upload(t, d, c)
						n0 := bf16Native.Load()
						if err := d.Gemm(g); err != nil {
							t.Fatalf("%s: %v", what, err)
						}
						if dt == runtime.BF16 && !widen && s.pad == 0 && threads == 1 && cpu.X86.HasAVX512BF16 && bf16Native.Load() == n0 {
							t.Errorf("%s: packed operands on a CPU with AVX512-BF16, yet not run by oneDNN's bfloat16 matmul", what)
						}
						got := download[float32](t, d, g.C, len(c))
						for bi := range s.batch {
							for i := range s.M {
								for j := range s.N {
									ref, abs := 0.0, 0.0
									for k := range s.K {
										ai, bk := bi*sa+i*lda+k, bi*sb+k*ldb+j
										if tr[0] {
											ai = bi*sa + k*lda + i
										}
										if tr[1] {
											bk = bi*sb + j*ldb + k
										}
										p := fromHalf(dt, a[ai]) * fromHalf(dt, b[bk])
										ref += p
										abs += math.Abs(p)
									}
									ci := bi*sc + i*ldc + j
									ref = 0.5*ref + 2*float64(c[ci])
									abs = 0.5*abs + 2*math.Abs(float64(c[ci]))
									// f32 sums only: no 16-bit rounding of C.
									if tol := float64(s.K+2)*0x1p-24*abs + 0x1p-40; math.Abs(float64(got[ci])-ref) > tol {
										t.Errorf("%s: C[%d][%d,%d] = %g, want %g within %g", what, bi, i, j, got[ci], ref, tol)
									}
								}
								for j := s.N; j < ldc; j++ {
									if ci := bi*sc + i*ldc + j; got[ci] != c[ci] {
										t.Errorf("%s: C[%d][%d,%d] in the padding was written", what, bi, i, j)
									}
								}
							}
						}
					}
				}
			}
		}
		// A batch of products summed into one f32 C: not one product.
		g := runtime.GemmArgs{DType: runtime.BF16, F32Out: true, M: 2, N: 2, K: 2, Alpha: 1, Beta: 1, Batch: 2, StrideA: 4, StrideB: 4}
		g.A, g.B, g.C = upload(t, d, make([]uint16, 8)), upload(t, d, make([]uint16, 8)), upload(t, d, make([]float32, 4))
		if err := d.Gemm(g); err == nil {
			t.Errorf("threads %d: a summed batch into an f32 C was not refused", threads)
		}
		// An f32 C of f32 operands is not a thing.
		g = runtime.GemmArgs{DType: runtime.F32, F32Out: true, M: 1, N: 1, K: 1, Alpha: 1, Batch: 1}
		g.A, g.B, g.C = upload(t, d, []float32{1}), upload(t, d, []float32{1}), upload(t, d, []float32{0})
		if err := d.Gemm(g); err == nil {
			t.Errorf("threads %d: F32Out with f32 operands was not refused", threads)
		}
	}
}
