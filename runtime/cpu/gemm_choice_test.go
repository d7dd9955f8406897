package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

// Planted bugs these tests catch (each planted by hand, seen to fail,
// reverted): ngen_sgemm_blas passing CblasNoTrans for B whatever its
// flag (TestSgemmLibrariesAgree); sgemmLibrary returning oneDNN always,
// and gemmSeq calling oneDNN whatever sgemmLibrary says
// (TestGemmRunsChosenLibrary, on a host where the rule applies);
// openBLASShape's output window off by a factor of two
// (TestOpenBLASShapeRule).

// sgemmCase is one f32 product on fixed random inputs, in device memory.
type sgemmCase struct {
	g       runtime.GemmArgs
	a, b, c []float32 // the inputs, C before the product
}

func newSgemmCase(t *testing.T, d *Device, r *rand.Rand, ta, tb bool, m, n, k, pad int, beta float64) sgemmCase {
	t.Helper()
	lda, ldb, ldc := k+pad, n+pad, n+pad
	rowsA, rowsB := m, k
	if ta {
		lda, rowsA = m+pad, k
	}
	if tb {
		ldb, rowsB = k+pad, n
	}
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 2*r.Float32() - 1
		}
		return v
	}
	c := sgemmCase{a: vec(rowsA * lda), b: vec(rowsB * ldb), c: vec(m * ldc)}
	c.g = runtime.GemmArgs{DType: runtime.F32, TransA: runtime.Transpose(ta), TransB: runtime.Transpose(tb), M: m, N: n, K: k,
		Alpha: 1, Beta: beta, A: upload(t, d, c.a), LDA: lda, B: upload(t, d, c.b), LDB: ldb, LDC: ldc, Batch: 1}
	return c
}

// run computes the product with lib (or, lib < 0, through Device.Gemm)
// on a fresh copy of C and returns C.
func (c sgemmCase) run(t *testing.T, d *Device, lib sgemmLib) []float32 {
	t.Helper()
	g := c.g
	g.C = upload(t, d, c.c)
	defer d.Free(g.C)
	if lib < 0 {
		if err := d.Gemm(g); err != nil {
			t.Fatal(err)
		}
	} else if err := sgemmOnce(lib, g); err != nil {
		t.Fatal(err)
	}
	return download[float32](t, d, g.C, len(c.c))
}

// TestSgemmLibrariesAgree computes products of every transpose
// combination, beta 0 and 1, with padded leading dimensions, with each
// library and checks them against a float64 reference: a rule that sends
// a shape to OpenBLAS must get the same product.
func TestSgemmLibrariesAgree(t *testing.T) {
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r := rand.New(rand.NewPCG(5, 6))
	for _, sh := range [][3]int{{7, 5, 9}, {128, 512, 64}, {96, 520, 300}} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				for _, beta := range []float64{0, 1} {
					m, n, k := sh[0], sh[1], sh[2]
					c := newSgemmCase(t, d, r, ta, tb, m, n, k, 3, beta)
					for _, lib := range []sgemmLib{oneDNN, openBLAS} {
						got := c.run(t, d, lib)
						for i := range m {
							for j := range n {
								var s, abs float64
								for p := range k {
									ai, bi := i*c.g.LDA+p, p*c.g.LDB+j
									if ta {
										ai = p*c.g.LDA + i
									}
									if tb {
										bi = j*c.g.LDB + p
									}
									s += float64(c.a[ai]) * float64(c.b[bi])
									abs += math.Abs(float64(c.a[ai]) * float64(c.b[bi]))
								}
								want := s + beta*float64(c.c[i*c.g.LDC+j])
								// f32 products summed in any order: k+2
								// roundings of at most 2^-24 of the
								// running sum's magnitude.
								tol := float64(k+2)*0x1p-24*(abs+math.Abs(beta*float64(c.c[i*c.g.LDC+j]))) + 1e-30
								if v := float64(got[i*c.g.LDC+j]); math.Abs(v-want) > tol {
									t.Fatalf("%v ta=%v tb=%v beta %g %dx%dx%d: C[%d][%d] = %v, want %v (tol %.3g)", lib, ta, tb, beta, m, n, k, i, j, v, want, tol)
								}
							}
						}
						// Padding past each row of C stays as it was.
						for i := range m {
							for j := n; j < c.g.LDC; j++ {
								if got[i*c.g.LDC+j] != c.c[i*c.g.LDC+j] {
									t.Fatalf("%v: padding C[%d][%d] written", lib, i, j)
								}
							}
						}
					}
					for _, p := range []runtime.Ptr{c.g.A, c.g.B} {
						d.Free(p)
					}
				}
			}
		}
	}
}

// TestOpenBLASShapeRule pins the rule to the measured shapes
// (docs/PERF.md, "GEMM library per shape on AVX2").
func TestOpenBLASShapeRule(t *testing.T) {
	for _, c := range []struct {
		ta, tb  bool
		m, n, k int
		want    bool
	}{
		// Linear weight gradients with a side of 1024, or K over 1024
		// tokens: OpenBLAS.
		{true, false, 1024, 256, 2048, true},
		{true, false, 256, 1024, 1024, true},
		{true, false, 1024, 128, 99, true},
		{true, false, 1024, 256, 32, true},
		{true, false, 512, 128, 4096, true},
		{true, false, 256, 256, 1024, true},
		// Even margins: the window's small-K shapes (charlm at batch 4 is
		// 512×128×256), oneDNN's wins: larger outputs, a side under 128,
		// K under 32.
		{true, false, 256, 256, 64, false},
		{true, false, 256, 512, 64, false},
		{true, false, 512, 128, 256, false},
		{true, false, 1024, 256, 31, false},
		{true, false, 2048, 1024, 128, false},
		{true, false, 512, 2048, 128, false},
		{true, false, 512, 784, 64, false},
		{true, false, 128, 3136, 64, false},
		{true, false, 288, 196, 64, false},
		{true, false, 99, 256, 2048, false},
		{true, false, 512, 128, 1, false},
		{true, false, 128, 128, 960, false},
		// A wide Linear layer's input gradient at small batch: OpenBLAS.
		{false, false, 128, 2048, 512, true},
		{false, false, 64, 512, 256, false},
		{false, false, 64, 3136, 128, false},
		{false, false, 64, 128, 512, false},
		{false, false, 1024, 1024, 256, false},
		// Forward products (B transposed) stay on oneDNN.
		{false, true, 1024, 256, 1024, false},
		{true, true, 1024, 256, 1024, false},
	} {
		g := runtime.GemmArgs{DType: runtime.F32, TransA: runtime.Transpose(c.ta), TransB: runtime.Transpose(c.tb), M: c.m, N: c.n, K: c.k}
		if got := openBLASShape(g); got != c.want {
			t.Errorf("openBLASShape(ta=%v tb=%v %dx%dx%d) = %v, want %v", c.ta, c.tb, c.m, c.n, c.k, got, c.want)
		}
	}
}

// TestGemmRunsChosenLibrary checks that Device.Gemm runs each product on
// the library sgemmLibrary names, by its bits: OpenBLAS for a weight
// gradient's shape where both libraries run their AVX2 kernels, oneDNN
// for a forward product and on every other host.
func TestGemmRunsChosenLibrary(t *testing.T) {
	if avx2Libraries() {
		t.Logf("oneDNN and OpenBLAS (%s) run their AVX2 kernels: the per-shape rule applies", blasCore())
	} else {
		t.Logf("oneDNN or OpenBLAS (%s) runs other than its AVX2 kernels: every f32 product goes to oneDNN", blasCore())
	}
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r := rand.New(rand.NewPCG(7, 8))
	for _, sh := range []struct {
		ta, tb  bool
		m, n, k int
	}{{true, false, 256, 256, 1024}, {false, true, 256, 256, 1024}} {
		c := newSgemmCase(t, d, r, sh.ta, sh.tb, sh.m, sh.n, sh.k, 0, 1)
		want := oneDNN
		if avx2Libraries() && openBLASShape(c.g) {
			want = openBLAS
		}
		if sgemmLibrary(c.g) != want {
			t.Fatalf("sgemmLibrary(%+v) = %v, want %v", sh, sgemmLibrary(c.g), want)
		}
		got, dnn, blas := c.run(t, d, -1), c.run(t, d, oneDNN), c.run(t, d, openBLAS)
		same := func(x, y []float32) bool {
			for i := range x {
				if math.Float32bits(x[i]) != math.Float32bits(y[i]) {
					return false
				}
			}
			return true
		}
		if same(dnn, blas) {
			t.Fatalf("%+v: oneDNN and OpenBLAS give the same bits: this test cannot tell which ran", sh)
		}
		if !same(got, map[sgemmLib][]float32{oneDNN: dnn, openBLAS: blas}[want]) {
			t.Errorf("%+v: Device.Gemm's result is not %v's", sh, want)
		}
	}
}
