package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

// naiveGemm is the reference: row-major C = alpha*op(A)*op(B) + beta*C for
// one batch entry.
func naiveGemm(ta, tb bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				ai, bi := i*lda+p, p*ldb+j
				if ta {
					ai = p*lda + i
				}
				if tb {
					bi = j*ldb + p
				}
				av, bv := a[ai], b[bi]
				s += av * bv
			}
			c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
		}
	}
}

func TestGemm(t *testing.T) {
	d, err := New(Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r := rand.New(rand.NewPCG(3, 4))
	const m, n, k = 7, 5, 9
	for _, dt := range []runtime.DType{runtime.F32, runtime.F64} {
		for _, batch := range []int{1, 3} {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					name := fmt.Sprintf("%s/batch%d/ta=%v/tb=%v", dt, batch, ta, tb)
					// Padded leading dimensions check that LD is honoured.
					lda, ldb, ldc := k+2, n+1, n+3
					rowsA, rowsB := m, k
					if ta {
						lda, rowsA = m+1, k
					}
					if tb {
						ldb, rowsB = k+3, n
					}
					sa, sb, sc := rowsA*lda, rowsB*ldb, m*ldc
					a, b, c := randVec(r, batch*sa), randVec(r, sb), randVec(r, batch*sc)
					want := append([]float64(nil), c...)
					for i := range batch {
						// B is shared across the batch (stride 0).
						naiveGemm(ta, tb, m, n, k, 1.5, a[i*sa:], lda, b, ldb, -0.5, want[i*sc:], ldc)
					}
					pa, pb, pc := uploadAs(t, d, dt, a), uploadAs(t, d, dt, b), uploadAs(t, d, dt, c)
					err := d.Gemm(runtime.GemmArgs{DType: dt, TransA: runtime.Transpose(ta), TransB: runtime.Transpose(tb),
						M: m, N: n, K: k, Alpha: 1.5, Beta: -0.5, A: pa, LDA: lda, B: pb, LDB: ldb, C: pc, LDC: ldc,
						Batch: batch, StrideA: sa, StrideB: 0, StrideC: sc})
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					got := downloadAs(t, d, dt, pc, len(c))
					// f32 GEMM reassociation and rounding of k=9 products: atol 1e-5.
					// f64: atol 1e-12.
					tol := 1e-12
					if dt == runtime.F32 {
						tol = 1e-5
					}
					for i := range got {
						if math.Abs(got[i]-want[i]) > tol {
							t.Fatalf("%s: C[%d] = %v, want %v", name, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

func TestGemmValidation(t *testing.T) {
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	p, _ := d.Alloc(1024)
	for _, tc := range []struct {
		g    runtime.GemmArgs
		want string
	}{
		{runtime.GemmArgs{DType: runtime.I32, M: 2, N: 2, K: 2, A: p, B: p, C: p}, "dtype i32 not supported"},
		{runtime.GemmArgs{DType: runtime.F32, M: 2, N: 2, K: 4, A: p, LDA: 3, B: p, C: p}, "LDA = 3, want >= 4"},
		{runtime.GemmArgs{DType: runtime.F32, M: 2, N: 2, K: 2, B: p, C: p}, "null matrix pointer"},
	} {
		if err := d.Gemm(tc.g); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want it to contain %q", err, tc.want)
		}
	}
}

func randVec(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		// Multiples of 1/8 keep f32 inputs exact.
		v[i] = float64(r.IntN(33)-16) / 8
	}
	return v
}

func uploadAs(t *testing.T, d *Device, dt runtime.DType, v []float64) runtime.Ptr {
	if dt == runtime.F64 {
		return upload(t, d, v)
	}
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = float32(x)
	}
	return upload(t, d, f)
}

func downloadAs(t *testing.T, d *Device, dt runtime.DType, p runtime.Ptr, n int) []float64 {
	if dt == runtime.F64 {
		return download[float64](t, d, p, n)
	}
	v := make([]float64, n)
	for i, x := range download[float32](t, d, p, n) {
		v[i] = float64(x)
	}
	return v
}

// TestCollapseBatch pins which batches run as one product (TestGemm and
// TestGemmSumBatch check the results, with padded leading dimensions).
// The rules are runtime.MConcat and runtime.KConcatGemm, which the GPU
// backend's lowering uses too.
func TestCollapseBatch(t *testing.T) {
	base := runtime.GemmArgs{DType: runtime.F32, M: 4, N: 3, K: 5, LDA: 6, LDB: 3, LDC: 7, Batch: 3, StrideA: 24, StrideC: 28}
	// A summed weight gradient, Σ_b op(A_b)·B_b with A_b the K×M rows
	// [bK, (b+1)K) of one matrix and B_b the same rows of another.
	sum := runtime.GemmArgs{DType: runtime.F32, M: 4, N: 3, K: 5, LDA: 6, LDB: 3, LDC: 7, Batch: 3, TransA: true,
		StrideA: 30, StrideB: 15, Beta: 1}
	for _, tc := range []struct {
		name string
		g    runtime.GemmArgs
		edit func(*runtime.GemmArgs)
		want string // "m" (Batch·M rows), "k" (K = Batch·K) or "" (kept)
	}{
		{"rows follow on, B shared", base, func(*runtime.GemmArgs) {}, "m"},
		{"one entry", base, func(g *runtime.GemmArgs) { g.Batch = 1 }, ""},
		{"B batched", base, func(g *runtime.GemmArgs) { g.StrideB = 15 }, ""},
		{"A transposed", base, func(g *runtime.GemmArgs) { g.TransA = true; g.LDA = 4; g.StrideA = 20 }, ""},
		{"gap between entries of A", base, func(g *runtime.GemmArgs) { g.StrideA = 30 }, ""},
		{"gap between entries of C", base, func(g *runtime.GemmArgs) { g.StrideC = 29 }, ""},
		{"summed into one C, A stacked", base, func(g *runtime.GemmArgs) { g.StrideC = 0; g.Beta = 1 }, ""},
		{"Batch·M beyond the library's int", base, func(g *runtime.GemmArgs) {
			g.Batch, g.M = 1<<12, 1<<20
			g.StrideA, g.StrideC = g.M*g.LDA, g.M*g.LDC
		}, ""},
		{"summed, rows follow on", sum, func(*runtime.GemmArgs) {}, "k"},
		{"summed, A side by side", sum, func(g *runtime.GemmArgs) { g.TransA = false; g.LDA = 15; g.StrideA = 5 }, "k"},
		{"summed, B side by side", sum, func(g *runtime.GemmArgs) { g.TransB = true; g.LDB = 16; g.StrideB = 5 }, "k"},
		{"summed, beta 0", sum, func(g *runtime.GemmArgs) { g.Beta = 0 }, ""},
		{"summed, gap between entries of A", sum, func(g *runtime.GemmArgs) { g.StrideA = 36 }, ""},
		{"summed, gap between entries of B", sum, func(g *runtime.GemmArgs) { g.StrideB = 18 }, ""},
		{"summed, B shared", sum, func(g *runtime.GemmArgs) { g.StrideB = 0 }, ""},
		{"Batch·K beyond the library's int", sum, func(g *runtime.GemmArgs) {
			g.Batch, g.K = 1<<12, 1<<20
			g.StrideA, g.StrideB = g.K*g.LDA, g.K*g.LDB
		}, ""},
	} {
		g := tc.g
		tc.edit(&g)
		before := g
		collapseBatch(&g)
		got := ""
		if g.Batch == 1 && before.Batch > 1 {
			got = "m"
			if g.K != before.K {
				got = "k"
			}
		}
		if got != tc.want {
			t.Errorf("%s: collapsed %q, want %q (%+v)", tc.name, got, tc.want, g)
		}
		switch {
		case got == "m" && (g.M != before.M*before.Batch || g.StrideA != 0 || g.StrideC != 0 || g.LDA != before.LDA || g.LDC != before.LDC):
			t.Errorf("%s: collapsed to %+v", tc.name, g)
		case got == "k" && (g.K != before.K*before.Batch || g.M != before.M || g.StrideA != 0 || g.StrideB != 0 ||
			g.LDA != before.LDA || g.LDB != before.LDB || g.Beta != 1):
			t.Errorf("%s: collapsed to %+v", tc.name, g)
		}
	}
}

// TestGemmSumBatch checks a batch of products summed into one C (StrideC
// 0, beta 1, as a convolution's weight gradient runs) on one thread and
// split across three, where each thread past the first sums into its own
// partial.
func TestGemmSumBatch(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	// The second shape is narrow (N < 16, M ≥ 2N): f32 runs it transposed
	// (skinnySum). With A transposed, the third and fourth are one GEMM
	// with K = 7·K (k-concat: A's and B's entries are consecutive rows).
	for _, sh := range []struct {
		m, n, k int
		ta, tb  bool
	}{{6, 4, 5, false, false}, {12, 3, 5, false, true}, {10, 4, 7, true, false}, {9, 20, 6, true, false}} {
		const batch = 7
		m, n, k := sh.m, sh.n, sh.k
		lda, ldb, ldc := k, n, n+2
		if sh.ta {
			lda = m
		}
		if sh.tb {
			ldb = k
		}
		a, b, c := randVec(r, batch*m*k), randVec(r, batch*k*n), randVec(r, m*ldc)
		want := append([]float64(nil), c...)
		for i := range batch {
			naiveGemm(sh.ta, sh.tb, m, n, k, 1, a[i*m*k:], lda, b[i*k*n:], ldb, 1, want, ldc)
		}
		for _, threads := range []int{1, 3} {
			for _, dt := range []runtime.DType{runtime.F32, runtime.F64} {
				d, err := New(Options{Threads: threads})
				if err != nil {
					t.Fatal(err)
				}
				pa, pb, pc := uploadAs(t, d, dt, a), uploadAs(t, d, dt, b), uploadAs(t, d, dt, c)
				if err := d.Gemm(runtime.GemmArgs{DType: dt, M: m, N: n, K: k, Alpha: 1, Beta: 1, A: pa, B: pb, C: pc,
					LDA: lda, LDB: ldb, LDC: ldc, TransA: runtime.Transpose(sh.ta), TransB: runtime.Transpose(sh.tb),
					Batch: batch, StrideA: m * k, StrideB: k * n, StrideC: 0}); err != nil {
					t.Fatal(err)
				}
				got := downloadAs(t, d, dt, pc, len(c))
				tol := 1e-12
				if dt == runtime.F32 {
					tol = 1e-4 // seven f32 products summed in another order
				}
				for i := range got {
					if math.Abs(got[i]-want[i]) > tol {
						t.Fatalf("%+v, %d threads, %s: C[%d] = %v, want %v", sh, threads, dt, i, got[i], want[i])
					}
				}
				d.Close()
			}
		}
	}
}
