package runtime_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestLowerGemm runs every lowering's calls through runtime/cpu's Gemm (the
// row-major reference) and compares C with the original GemmArgs run the
// same way, for each shape of lowering runtime/cuda issues, including the
// ConvNet's weight gradients (scratch+reduce) and forward convolutions
// (strided).
func TestLowerGemm(t *testing.T) {
	d, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r := rand.New(rand.NewPCG(1, 2))
	type tc struct {
		name string
		g    runtime.GemmArgs
		how  string
	}
	packed := func(ta, tb bool, m, n, k, batch int, ba, bb, sum bool) runtime.GemmArgs {
		gm := runtime.Gemm{TransA: ta, TransB: tb, M: runtime.Size{Mul: int64(m)}, N: runtime.Size{Mul: int64(n)},
			K: runtime.Size{Mul: int64(k)}, Batch: runtime.Size{Mul: int64(batch)}, BatchA: ba, BatchB: bb, SumBatch: sum, Alpha: 1}
		return gm.Args(nil, runtime.F32, nil)
	}
	cases := []tc{
		{"single", packed(false, true, 5, 7, 3, 1, false, false, false), "one"},
		{"conv forward (shared weights)", packed(false, false, 4, 9, 3, 6, false, true, false), "strided"},
		{"conv input gradient", packed(true, false, 5, 6, 4, 5, false, true, false), "strided"},
		{"conv weight gradient", packed(false, true, 4, 6, 5, 7, true, true, true), "scratch+reduce"},
		{"summed, packed stacked operands", packed(true, false, 3, 5, 4, 6, true, true, true), "k-concat"},
		{"stacked rows, shared B", packed(false, true, 3, 4, 5, 6, true, false, false), "m-concat"},
	}
	// Side-by-side A (stride K, LDA = Batch·K) and stacked B: one GEMM.
	kc := runtime.GemmArgs{M: 3, N: 4, K: 5, LDA: 6 * 5, LDB: 4, LDC: 4, Batch: 6, StrideA: 5, StrideB: 5 * 4, Alpha: 1, Beta: 1}
	cases = append(cases, tc{"k-concat", kc, "k-concat"})
	kcT := runtime.GemmArgs{TransA: true, TransB: true, M: 3, N: 4, K: 5, LDA: 3, LDB: 6 * 5, LDC: 4, Batch: 6, StrideA: 5 * 3, StrideB: 5, Alpha: 1, Beta: 1}
	cases = append(cases, tc{"k-concat transposed", kcT, "k-concat"})
	// C with padded rows: the reduction runs once per row of C.
	pad := packed(false, true, 4, 6, 5, 7, true, true, true)
	pad.LDC = 9
	cases = append(cases, tc{"summed into padded C", pad, "scratch+reduce"})
	// StrideC 0 with beta 0.5 is sequential, not a sum.
	seq := packed(false, false, 3, 4, 2, 3, true, true, true)
	seq.Beta = 0.5
	cases = append(cases, tc{"beta != 1", seq, "loop"})
	over := packed(false, false, 3, 4, 2, 3, true, true, false)
	over.StrideC = 4
	cases = append(cases, tc{"overlapping outputs", over, "loop"})
	for _, c := range cases {
		for _, dt := range []runtime.DType{runtime.F32, runtime.F64} {
			g := c.g
			g.DType = dt
			if g.Alpha == 0 {
				g.Alpha = 1
			}
			g.Alpha *= 0.75
			lo := runtime.LowerGemm(g, 0, 0)
			if lo.How != c.how {
				t.Errorf("%s: lowered as %s, want %s", c.name, lo.How, c.how)
			}
			wantCalls := map[string]int{"one": 1, "strided": 1, "m-concat": 1, "k-concat": 1, "scratch+reduce": 2, "loop": max(g.Batch, 1)}[c.how]
			if len(lo.Calls) != wantCalls {
				t.Errorf("%s: %d calls, want %d", c.name, len(lo.Calls), wantCalls)
			}
			for _, call := range lo.Calls {
				if call.Batch > 1 && call.StrideC <= 0 {
					t.Errorf("%s: a strided-batched call with StrideC %d", c.name, call.StrideC)
				}
			}
			sizeA := extent(g.Batch, g.StrideA, rowsA(g), g.LDA)
			sizeB := extent(g.Batch, g.StrideB, rowsB(g), g.LDB)
			sizeC := extent(g.Batch, g.StrideC, g.M, g.LDC)
			a, b, c0 := randVec(r, sizeA), randVec(r, sizeB), randVec(r, sizeC)
			want := run(t, d, dt, g, a, b, c0, 0, func(g runtime.GemmArgs, _, _ runtime.Ptr) []runtime.GemmArgs { return []runtime.GemmArgs{g} })
			got := run(t, d, dt, g, a, b, c0, lo.Scratch, func(g runtime.GemmArgs, s, o runtime.Ptr) []runtime.GemmArgs {
				return runtime.LowerGemm(g, s, o).Calls
			})
			tol := 1e-12
			if dt == runtime.F32 {
				tol = 1e-5
			}
			for i := range want {
				if math.Abs(got[i]-want[i]) > tol*(1+math.Abs(want[i])) {
					t.Fatalf("%s %s: C[%d] = %v, want %v", c.name, dt, i, got[i], want[i])
				}
			}
		}
	}
}

func rowsA(g runtime.GemmArgs) int {
	if g.TransA {
		return g.K
	}
	return g.M
}

func rowsB(g runtime.GemmArgs) int {
	if g.TransB {
		return g.N
	}
	return g.K
}

// extent is the elements a batch of rows×ld matrices spans.
func extent(batch, stride, rows, ld int) int {
	return max(batch-1, 0)*stride + rows*ld
}

func randVec(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = r.Float64()*2 - 1
	}
	return v
}

// run uploads a, b, c as dt, issues the calls lower returns for g (with
// its pointers filled in), and downloads C.
func run(t *testing.T, d runtime.Device, dt runtime.DType, g runtime.GemmArgs, a, b, c []float64, scratch int64,
	lower func(g runtime.GemmArgs, scratch, ones runtime.Ptr) []runtime.GemmArgs) []float64 {
	t.Helper()
	g.A, g.B, g.C = upload(t, d, dt, a), upload(t, d, dt, b), upload(t, d, dt, c)
	ones := make([]float64, max(g.Batch, 1))
	for i := range ones {
		ones[i] = 1
	}
	// Scratch starts as garbage: the products must overwrite it.
	sp, op := upload(t, d, dt, randVec(rand.New(rand.NewPCG(9, 9)), int(scratch)+1)), upload(t, d, dt, ones)
	for _, call := range lower(g, sp, op) {
		if err := d.Gemm(call); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]float64, len(c))
	es := dt.Size()
	raw := make([]byte, len(c)*es)
	if err := d.CopyToHost(unsafe.Pointer(&raw[0]), g.C, int64(len(raw))); err != nil {
		t.Fatal(err)
	}
	for i := range out {
		if dt == runtime.F32 {
			out[i] = float64(*(*float32)(unsafe.Pointer(&raw[i*4])))
		} else {
			out[i] = *(*float64)(unsafe.Pointer(&raw[i*8]))
		}
	}
	for _, p := range []runtime.Ptr{g.A, g.B, g.C, sp, op} {
		d.Free(p)
	}
	return out
}

func upload(t *testing.T, d runtime.Device, dt runtime.DType, v []float64) runtime.Ptr {
	t.Helper()
	es := dt.Size()
	raw := make([]byte, max(len(v), 1)*es)
	for i, x := range v {
		if dt == runtime.F32 {
			*(*float32)(unsafe.Pointer(&raw[i*4])) = float32(x)
		} else {
			*(*float64)(unsafe.Pointer(&raw[i*8])) = x
		}
	}
	p, err := d.Alloc(int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyToDevice(p, unsafe.Pointer(&raw[0]), int64(len(raw))); err != nil {
		t.Fatal(err)
	}
	return p
}
