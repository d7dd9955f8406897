package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"

	"github.com/ngen-ml/ngen/runtime"
)

// h2f widens an IEEE binary16 (exact).
func h2f(h uint16) float64 {
	e, m := int(h>>10)&0x1f, float64(h&0x3ff)
	var v float64
	switch e {
	case 0x1f:
		v = math.Inf(1)
		if m != 0 {
			return math.NaN()
		}
	case 0:
		v = m * 0x1p-24
	default:
		v = (1 + m/1024) * math.Ldexp(1, e-15)
	}
	if h&0x8000 != 0 {
		v = -v
	}
	return v
}

// f2h rounds v to binary16 on its own terms: the nearest of the two
// patterns around |v|, ties to the even one, and |v| ≥ 65520 to
// infinity (IEEE round to nearest even).
func f2h(v float64) uint16 {
	if math.IsNaN(v) {
		return 0x7fff
	}
	var sign uint16
	if math.Signbit(v) {
		sign = 0x8000
	}
	a := math.Abs(v)
	if a >= 65520 {
		return sign | 0x7c00
	}
	lo, hi := 0, 0x7bff // the largest pattern p with h2f(p) ≤ a
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if h2f(uint16(mid)) <= a {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	p := uint16(lo)
	if d0, d1 := a-h2f(p), h2f(p+1)-a; d1 < d0 || d1 == d0 && p&1 == 1 {
		p++
	}
	return sign | p
}

// TestGemmF16 checks the f16 GEMM (cublasGemmEx with CUDA_R_16F and
// CUBLAS_COMPUTE_32F, gemm_half.go) against a float64 reference of the
// f16 inputs, rounded to binary16: bit for bit where the f32 sums are
// exact (integers, ties to even, overflow to infinity, subnormals), and
// within the f32 accumulation's error otherwise.
func TestGemmF16(t *testing.T) {
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	run := func(g runtime.GemmArgs, a, b, c []uint16) []uint16 {
		t.Helper()
		g.DType = runtime.F16
		g.A, g.B, g.C = upload(t, d, a), upload(t, d, b), upload(t, d, c)
		if err := d.Gemm(g); err != nil {
			t.Fatal(err)
		}
		return download[uint16](t, d, g.C, len(c))
	}

	// Exact cases: A is M×2, B 2×1 of powers of two, so each C is a sum
	// an f32 holds exactly.
	exact := []struct {
		a    []float64 // one row of K = 2; B is (1, 0.5)
		want uint16
	}{
		{[]float64{2048, 2}, f2h(2048)},           // 2049: a tie, to even (2048)
		{[]float64{2048, 6}, f2h(2052)},           // 2051: a tie, to even (2052)
		{[]float64{65504, 30}, 0x7bff},            // 65519: below the midpoint to infinity
		{[]float64{65504, 32}, 0x7c00},            // 65520: the midpoint, to infinity
		{[]float64{-65504, -65504}, 0xfc00},       // -98256: -inf
		{[]float64{0x1p-14, -0x1p-15}, 0x300},     // 3·2^-16: a subnormal
		{[]float64{3 * 0x1p-24, 0x1p-24}, 0x0004}, // 3.5·2^-24: a tie, to even (4·2^-24)
		{[]float64{0x1p-24, -0x1p-23}, 0},         // +0
	}
	var a, b, c []uint16
	for _, e := range exact {
		for _, x := range e.a {
			h := f2h(x)
			if h2f(h) != x {
				t.Fatalf("%g is not a half", x)
			}
			a = append(a, h)
		}
		c = append(c, 0x1234) // beta = 0 ignores it
	}
	b = []uint16{f2h(1), f2h(0.5)}
	got := run(runtime.GemmArgs{M: len(exact), N: 1, K: 2, Alpha: 1, A: 0, LDA: 2, LDB: 1, LDC: 1, Batch: 1}, a, b, c)
	for i, e := range exact {
		if got[i] != e.want {
			t.Errorf("exact case %d (%v): got %#04x (%g), want %#04x (%g)", i, e.a, got[i], h2f(got[i]), e.want, h2f(e.want))
		}
	}

	// Random halves, transposed operands, beta ≠ 0 and a batch.
	rng := rand.New(rand.NewPCG(7, 8))
	const M, N, K, batch = 7, 5, 33, 2
	rnd := func(n int) []uint16 {
		xs := make([]uint16, n)
		for i := range xs {
			xs[i] = f2h(rng.NormFloat64())
		}
		return xs
	}
	for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
		a, b, c := rnd(batch*M*K), rnd(batch*K*N), rnd(batch*M*N)
		lda, ldb := K, N
		if tr[0] {
			lda = M
		}
		if tr[1] {
			ldb = K
		}
		g := runtime.GemmArgs{M: M, N: N, K: K, Alpha: 0.5, Beta: 2, TransA: runtime.Transpose(tr[0]), TransB: runtime.Transpose(tr[1]),
			LDA: lda, LDB: ldb, LDC: N, Batch: batch, StrideA: M * K, StrideB: K * N, StrideC: M * N}
		got := run(g, a, b, c)
		for bi := range batch {
			for i := range M {
				for j := range N {
					ref, abs := 0.0, 0.0
					for k := range K {
						ai, bk := bi*M*K+i*K+k, bi*K*N+k*N+j
						if tr[0] {
							ai = bi*M*K + k*M + i
						}
						if tr[1] {
							bk = bi*K*N + j*K + k
						}
						p := h2f(a[ai]) * h2f(b[bk])
						ref += p
						abs += math.Abs(p)
					}
					ci := bi*M*N + i*N + j
					ref = 0.5*ref + 2*h2f(c[ci])
					abs = 0.5*abs + 2*math.Abs(h2f(c[ci]))
					x := h2f(got[ci])
					// The f32 sums' rounding (K+2 of them, 2^-24 each,
					// relative to the sum of magnitudes), then half an
					// f16 ulp of the result (2^-11 relative).
					tol := float64(K+2)*0x1p-24*abs + 0x1p-11*math.Abs(ref) + 0x1p-25
					if math.Abs(x-ref) > tol {
						t.Errorf("trans %v batch %d C[%d,%d] = %g, want %g within %g", tr, bi, i, j, x, ref, tol)
					}
				}
			}
		}
	}
}

// TestGemmHalfSummedBatch: a batch of 16-bit products into one C
// (StrideC 0, beta 1) accumulates in f32 and rounds once, as one GEMM
// would. C starts at 1 and each of 64 entries adds a quarter of the
// type's ulp at 1 (2^-9 for bf16, 2^-12 for f16): rounded after each
// entry the sum would stay 1, rounded once it is 1 + 16 ulps. A's
// entries are not side by side, so collapseBatch does not make it one
// larger GEMM first.
func TestGemmHalfSummedBatch(t *testing.T) {
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const batch = 64
	for _, c := range []struct {
		dt  runtime.DType
		inc float64
	}{{runtime.BF16, 0x1p-9}, {runtime.F16, 0x1p-12}} {
		enc := func(x float64) uint16 {
			if c.dt == runtime.F16 {
				return f2h(x)
			}
			return uint16(math.Float32bits(float32(x)) >> 16) // exact for these values
		}
		// A_i is the 1×2 row (inc, 0) at stride 3, B the shared column (1, 1).
		a := make([]uint16, 3*batch)
		for i := range batch {
			a[3*i] = enc(c.inc)
		}
		g := runtime.GemmArgs{DType: c.dt, M: 1, N: 1, K: 2, Alpha: 1, Beta: 1, LDA: 2, LDB: 1, LDC: 1,
			Batch: batch, StrideA: 3, StrideB: 0, StrideC: 0}
		g.A, g.B, g.C = upload(t, d, a), upload(t, d, []uint16{enc(1), enc(1)}), upload(t, d, []uint16{enc(1)})
		if err := d.Gemm(g); err != nil {
			t.Fatal(err)
		}
		want := 1 + batch*c.inc
		if got := download[uint16](t, d, g.C, 1)[0]; got != enc(want) {
			t.Errorf("%s: summed batch gives %#04x, want %#04x (%g): rounded once", c.dt, got, enc(want), want)
		}
	}
}

// TestGemmBF16 checks bfloat16 products on both of the CPU's paths
// (oneDNN's native matmul where the CPU has AVX512-BF16 or AMX, and the
// operands widened to f32 for sgemm) against float64 sums of the same
// bfloat16 values: transposed operands, leading dimensions wider than
// the rows, alpha and beta, a batch with a shared B (broadcast) and
// sizes of 1 and odd primes. The tolerance is the f32 sums' rounding
// ((K+2)·2^-24 of the sum of magnitudes) plus half a bfloat16 ulp of
// the result (2^-8 relative). On a CPU with AVX512-BF16 the native path
// must be the one taken for every product of packed matrices (oneDNN
// 2.6 runs a padded C or operand with its emulating gemm:jit, which the
// widening path beats, so those fall back).
func TestGemmBF16(t *testing.T) {
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer func(w bool) { bf16Widen = w }(bf16Widen)
	rng := rand.New(rand.NewPCG(9, 10))
	bf := func(x float64) uint16 { // round to nearest even (finite x)
		u := math.Float32bits(float32(x))
		return uint16((u + 0x7fff + (u>>16)&1) >> 16)
	}
	b2f := func(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }
	rnd := func(n int) []uint16 {
		xs := make([]uint16, n)
		for i := range xs {
			xs[i] = bf(rng.NormFloat64())
		}
		return xs
	}
	type shape struct{ M, N, K, batch, pad int }
	shapes := []shape{{1, 1, 1, 1, 0}, {7, 5, 33, 2, 0}, {7, 5, 33, 2, 3}, {13, 1, 64, 3, 0}, {64, 31, 97, 1, 0}, {64, 31, 97, 1, 5}, {3, 17, 1, 2, 0}, {3, 17, 1, 2, 1}}
	for _, widen := range []bool{false, true} {
		bf16Widen = widen
		before := bf16Native.Load()
		for _, s := range shapes {
			for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
				for _, shareB := range []bool{false, true} {
					if shareB && s.batch == 1 {
						continue
					}
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
					nb := s.batch * sb
					if shareB {
						sb, nb = 0, sb
					}
					a, b, c := rnd(s.batch*sa), rnd(nb), rnd(s.batch*sc)
					g := runtime.GemmArgs{DType: runtime.BF16, M: s.M, N: s.N, K: s.K, Alpha: 0.5, Beta: 2,
						TransA: runtime.Transpose(tr[0]), TransB: runtime.Transpose(tr[1]), LDA: lda, LDB: ldb, LDC: ldc,
						Batch: s.batch, StrideA: sa, StrideB: sb, StrideC: sc}
					g.A, g.B, g.C = upload(t, d, a), upload(t, d, b), upload(t, d, c)
					n0 := bf16Native.Load()
					if err := d.Gemm(g); err != nil {
						t.Fatal(err)
					}
					if !widen && s.pad == 0 && cpu.X86.HasAVX512BF16 && bf16Native.Load() == n0 {
						t.Errorf("%+v trans %v shared B %v: packed operands on a CPU with AVX512-BF16, yet not run by oneDNN's bfloat16 matmul", s, tr, shareB)
					}
					got := download[uint16](t, d, g.C, len(c))
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
									p := b2f(a[ai]) * b2f(b[bk])
									ref += p
									abs += math.Abs(p)
								}
								ci := bi*sc + i*ldc + j
								ref = 0.5*ref + 2*b2f(c[ci])
								abs = 0.5*abs + 2*math.Abs(b2f(c[ci]))
								tol := float64(s.K+2)*0x1p-24*abs + 0x1p-8*math.Abs(ref) + 0x1p-30
								if x := b2f(got[ci]); math.Abs(x-ref) > tol {
									t.Errorf("widen=%v %+v trans %v shared B %v: C[%d][%d,%d] = %g, want %g within %g",
										widen, s, tr, shareB, bi, i, j, x, ref, tol)
								}
							}
							for j := s.N; j < ldc; j++ { // the padding is left alone
								if ci := bi*sc + i*ldc + j; got[ci] != c[ci] {
									t.Errorf("widen=%v %+v: C[%d][%d,%d] in the padding was written", widen, s, bi, i, j)
								}
							}
						}
					}
				}
			}
		}
		native := bf16Native.Load() - before
		switch {
		case widen && native != 0:
			t.Errorf("bf16Widen set, yet oneDNN's matmul ran %d products", native)
		case !widen && cpu.X86.HasAVX512BF16 && native == 0:
			t.Errorf("the CPU has AVX512-BF16, yet no product ran on oneDNN's bfloat16 matmul")
		case !widen:
			t.Logf("oneDNN's native bfloat16 matmul ran %d of the products (AVX512-BF16: %v)", native, cpu.X86.HasAVX512BF16)
		}
	}
}

// TestGemmHalfThreads: a device with more threads shares 16-bit products
// as it does f32 ones (rows of C, or batch entries) and computes the same
// bits as one thread: each share is a product of the same K on packed
// rows (oneDNN's native bfloat16 matmul) or widened rows (the other
// path), and every element's sum is the same sum. A transposed A stays
// whole (a share of its columns would not be packed).
func TestGemmHalfThreads(t *testing.T) {
	type shape struct {
		M, N, K, batch int
		ta             bool
	}
	for _, dt := range []runtime.DType{runtime.BF16, runtime.F16} {
		for _, widen := range []bool{false, true} {
			if dt == runtime.F16 && widen {
				continue // f16 always widens
			}
			for _, s := range []shape{{64, 512, 784, 1, false}, {67, 31, 97, 1, false}, {64, 33, 50, 1, true}, {16, 33, 17, 4, false}} {
				var results [][]uint16
				var natives []int64
				for _, threads := range []int{1, 3} {
					func() {
						d, err := New(Options{Threads: threads})
						if err != nil {
							t.Fatal(err)
						}
						defer d.Close()
						defer func(w bool) { bf16Widen = w }(bf16Widen)
						bf16Widen = widen
						r := rand.New(rand.NewPCG(uint64(s.M), uint64(s.K)))
						rnd := func(n int) []uint16 {
							xs := make([]uint16, n)
							for i := range xs {
								v := r.NormFloat64()
								if dt == runtime.F16 {
									xs[i] = f2h(v)
								} else {
									xs[i] = uint16(math.Float32bits(float32(v)) >> 16)
								}
							}
							return xs
						}
						lda := s.K
						if s.ta {
							lda = s.M
						}
						g := runtime.GemmArgs{DType: dt, M: s.M, N: s.N, K: s.K, Alpha: 1, Beta: 1, TransA: runtime.Transpose(s.ta),
							LDA: lda, LDB: s.N, LDC: s.N, Batch: s.batch, StrideA: s.M * s.K, StrideB: s.K * s.N, StrideC: s.M * s.N}
						g.A, g.B, g.C = upload(t, d, rnd(s.batch*s.M*s.K)), upload(t, d, rnd(s.batch*s.K*s.N)), upload(t, d, rnd(s.batch*s.M*s.N))
						n0 := bf16Native.Load()
						if err := d.Gemm(g); err != nil {
							t.Fatal(err)
						}
						natives = append(natives, bf16Native.Load()-n0)
						results = append(results, download[uint16](t, d, g.C, s.batch*s.M*s.N))
					}()
				}
				for i := range results[0] {
					if results[0][i] != results[1][i] {
						t.Errorf("%s widen=%v %+v: C[%d] is %#04x on 1 thread, %#04x on 3", dt, widen, s, i, results[0][i], results[1][i])
						break
					}
				}
				// On a CPU with AVX512-BF16, 3 threads make 3 native shares
				// of a bfloat16 product, except with A transposed.
				if dt == runtime.BF16 && !widen && cpu.X86.HasAVX512BF16 {
					want := []int64{1, 3}
					if s.ta {
						want[1] = 1
					}
					if natives[0] != want[0] || natives[1] != want[1] {
						t.Errorf("%+v: oneDNN's native matmul ran %v products on 1 and 3 threads, want %v", s, natives, want)
					}
				}
			}
		}
	}
}

// TestGemmF16Conversions runs every binary16 pattern through the f16
// GEMM's widening and narrowing, on both paths (gemm_half.go's
// branch-free integer loops, and F16C's instructions where the CPU has
// them; a narrowing that left F16C's NaNs as they come fails it): one
// product of the 65536-row column A (every pattern) with the row B of
// multipliers. Each C element is the exact f32 product a·b rounded
// once, so it must be f2h(h2f(a)·h2f(b) + 0): b = 1 returns every pattern
// (NaNs as 0x7fff), the others make ties, subnormals, underflow to zero
// and overflow to infinity.
func TestGemmF16Conversions(t *testing.T) {
	paths := []bool{false}
	if f16cSupported() {
		paths = append(paths, true)
	}
	defer setF16C(f16cOn())
	for _, on := range paths {
		t.Run(map[bool]string{false: "integer", true: "F16C"}[on], func(t *testing.T) {
			setF16C(on)
			gemmF16Conversions(t)
		})
	}
}

func gemmF16Conversions(t *testing.T) {
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const M = 65536
	mult := []float64{1, 1 + 0x1p-10, 1.0 / 3, 3, 0x1p-10, 0x1p-24, 1000, -0.5 - 0x1p-11}
	a := make([]uint16, M)
	for i := range a {
		a[i] = uint16(i)
	}
	b := make([]uint16, len(mult))
	for j, m := range mult {
		b[j] = f2h(m)
	}
	g := runtime.GemmArgs{DType: runtime.F16, M: M, N: len(mult), K: 1, Alpha: 1, LDA: 1, LDB: len(mult), LDC: len(mult), Batch: 1}
	g.A, g.B, g.C = upload(t, d, a), upload(t, d, b), upload(t, d, make([]uint16, M*len(mult)))
	if err := d.Gemm(g); err != nil {
		t.Fatal(err)
	}
	got := download[uint16](t, d, g.C, M*len(mult))
	bad := 0
	for i := range M {
		for j := range mult {
			// (+ 0: a sum of one product starts from +0, so a -0
			// product gives +0, as in any GEMM.)
			want := f2h(float64(float32(h2f(uint16(i))*h2f(b[j]))) + 0)
			if x := got[i*len(mult)+j]; x != want && bad < 10 {
				bad++
				t.Errorf("%#04x × %#04x: got %#04x, want %#04x", i, b[j], x, want)
			}
		}
	}
}
