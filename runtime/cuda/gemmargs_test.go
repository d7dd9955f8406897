package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// The GEMM operand mapping the GPU backend hands cuBLAS (cublasArgs), run
// without a GPU: a column-major reference GEMM with cuBLAS's semantics,
// driven by exactly the arguments cublasArgs builds, must match the
// row-major reference that runtime/cpu's Gemm is checked against. It
// covers both transposes, odd sizes, padded leading dimensions, batch
// strides, shared operands (stride 0), summed batches (StrideC 0, Beta 1)
// and K = 0.
//
// Planted bugs this file catches (each planted by hand in cublasArgs,
// seen to fail, reverted), all in TestCublasArgsMapping: the transpose
// flags swapped (TransA: g.TransA, TransB: g.TransB); the operands and
// their leading dimensions left unswapped; the batch strides left
// unswapped.

// fakeMem is device memory for the references: Ptr p is element
// (p-fakeBase)/size of mem.
const fakeBase = 1 << 20

func fakeAt[T float32 | float64](mem []T, p runtime.Ptr, off int) *T {
	return &mem[(int(p)-fakeBase)/int(unsafe.Sizeof(T(0)))+off]
}

// colMajorGemm runs call as cuBLAS defines cublas{S,D}gemm, entry by entry.
func colMajorGemm[T float32 | float64](call cublasCall, mem []T) {
	for e := range call.Batch {
		a, b, c := call.entry(e)
		pa, pb, pc := runtime.Ptr(a), runtime.Ptr(b), runtime.Ptr(c)
		for j := range call.N {
			for i := range call.M {
				var s float64
				for l := range call.K {
					ai := i + l*call.LDA // op(A)[i,l], A stored M×K column-major
					if call.TransA {
						ai = l + i*call.LDA
					}
					bi := l + j*call.LDB // op(B)[l,j]
					if call.TransB {
						bi = j + l*call.LDB
					}
					s += float64(*fakeAt(mem, pa, ai)) * float64(*fakeAt(mem, pb, bi))
				}
				ci := fakeAt(mem, pc, i+j*call.LDC)
				*ci = T(call.Alpha*s + call.Beta*float64(*ci))
			}
		}
	}
}

// rowMajorGemm is runtime.GemmArgs' definition, after normalizeGemm.
func rowMajorGemm[T float32 | float64](g runtime.GemmArgs, mem []T) {
	for e := range g.Batch {
		for r := range g.M {
			for j := range g.N {
				var s float64
				for l := range g.K {
					ai := r*g.LDA + l
					if g.TransA {
						ai = l*g.LDA + r
					}
					bi := l*g.LDB + j
					if g.TransB {
						bi = j*g.LDB + l
					}
					s += float64(*fakeAt(mem, g.A, e*g.StrideA+ai)) * float64(*fakeAt(mem, g.B, e*g.StrideB+bi))
				}
				ci := fakeAt(mem, g.C, e*g.StrideC+r*g.LDC+j)
				*ci = T(g.Alpha*s + g.Beta*float64(*ci))
			}
		}
	}
}

// gemmCases lays out A, B and C one after another in fake memory.
func gemmCases(dt runtime.DType) []runtime.GemmArgs {
	var out []runtime.GemmArgs
	es := dt.Size()
	for _, ta := range []runtime.Transpose{runtime.NoTrans, runtime.Trans} {
		for _, tb := range []runtime.Transpose{runtime.NoTrans, runtime.Trans} {
			for _, sh := range []struct{ m, n, k, batch, pad int }{
				{1, 1, 1, 1, 0}, {3, 5, 7, 1, 0}, {7, 3, 5, 1, 2}, {5, 7, 3, 3, 1}, {2, 9, 4, 2, 3}, {4, 4, 0, 2, 0},
			} {
				for _, mode := range []string{"strided", "shared A", "shared B", "summed"} {
					if mode != "strided" && sh.batch == 1 {
						continue
					}
					g := runtime.GemmArgs{DType: dt, TransA: ta, TransB: tb, M: sh.m, N: sh.n, K: sh.k,
						Alpha: 0.75, Beta: 0.5, Batch: sh.batch}
					rowsA, colsA := sh.m, sh.k
					if ta {
						rowsA, colsA = sh.k, sh.m
					}
					rowsB, colsB := sh.k, sh.n
					if tb {
						rowsB, colsB = sh.n, sh.k
					}
					if sh.pad > 0 {
						g.LDA, g.LDB, g.LDC = colsA+sh.pad, colsB+sh.pad+1, sh.n+sh.pad
					}
					lda, ldb, ldc := max(g.LDA, colsA, 1), max(g.LDB, colsB, 1), max(g.LDC, sh.n)
					g.StrideA, g.StrideB, g.StrideC = rowsA*lda+1, rowsB*ldb+2, sh.m*ldc+3
					switch mode {
					case "shared A":
						g.StrideA = 0
					case "shared B":
						g.StrideB = 0
					case "summed":
						g.StrideC, g.Beta = 0, 1
					}
					spanA := g.StrideA*(sh.batch-1) + rowsA*lda + 1
					spanB := g.StrideB*(sh.batch-1) + rowsB*ldb + 1
					g.A = runtime.Ptr(fakeBase)
					g.B = g.A + runtime.Ptr(spanA*es)
					g.C = g.B + runtime.Ptr(spanB*es)
					out = append(out, g)
				}
			}
		}
	}
	return out
}

func spanC(g runtime.GemmArgs) int {
	ldc := max(g.LDC, g.N)
	return g.StrideC*(max(g.Batch, 1)-1) + g.M*ldc + 1
}

func runCublasArgsCase[T float32 | float64](t *testing.T, g runtime.GemmArgs, tol float64) {
	t.Helper()
	es := int(unsafe.Sizeof(T(0)))
	n := (int(g.C)-fakeBase)/es + spanC(g)
	rng := rand.New(rand.NewPCG(uint64(g.M*100+g.N*10+g.K), uint64(g.Batch)))
	init := make([]T, n)
	for i := range init {
		init[i] = T(rng.IntN(17) - 8) // small integers: exact in f32 sums of these sizes
	}
	want := append([]T(nil), init...)
	norm := g
	if err := normalizeGemm(&norm); err != nil {
		t.Fatal(err)
	}
	rowMajorGemm(norm, want)
	call, err := cublasArgs(g)
	if err != nil {
		t.Fatal(err)
	}
	got := append([]T(nil), init...)
	colMajorGemm(call, got)
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > tol {
			t.Fatalf("%s trans %v,%v %dx%dx%d batch %d strides %d,%d,%d ld %d,%d,%d: element %d = %v, want %v (cuBLAS call %+v)",
				g.DType, g.TransA, g.TransB, g.M, g.N, g.K, g.Batch, g.StrideA, g.StrideB, g.StrideC, g.LDA, g.LDB, g.LDC,
				i, got[i], want[i], call)
		}
	}
}

// TestCublasArgsMapping: exact, since every product and sum of small
// integers is exact in f32 and f64.
func TestCublasArgsMapping(t *testing.T) {
	for _, dt := range []runtime.DType{runtime.F32, runtime.F64} {
		cases := gemmCases(dt)
		for _, g := range cases {
			if dt == runtime.F32 {
				runCublasArgsCase[float32](t, g, 0)
			} else {
				runCublasArgsCase[float64](t, g, 0)
			}
		}
		t.Logf("%s: %d cases", dt, len(cases))
	}
}

// widen maps a fake address of 2-byte elements to the same element's
// address among 4-byte ones (0 stays 0).
func widen(p runtime.Ptr) runtime.Ptr {
	if p == 0 {
		return 0
	}
	return fakeBase + 2*(p-fakeBase)
}

// TestCublasArgsHalf: bf16 and f16 GEMMs (cublasGemmEx) take the mapping
// of f32 ones, with 2-byte elements. Each half case is checked as the f32
// case whose fake addresses are twice as far from the base (the same
// element offsets in 4-byte units): the call cublasArgs builds must be
// that case's call with the addresses halved back, entry by entry, and
// the column-major reference driven by it must match the row-major one.
func TestCublasArgsHalf(t *testing.T) {
	for _, dt := range []runtime.DType{runtime.BF16, runtime.F16} {
		if shimDType(dt) < 2 {
			t.Fatalf("%s: shim code %d", dt, shimDType(dt))
		}
		for _, g := range gemmCases(dt) {
			call, err := cublasArgs(g)
			if err != nil {
				t.Fatal(err)
			}
			if call.DType != dt {
				t.Fatalf("call dtype %s, want %s", call.DType, dt)
			}
			g32 := g
			g32.DType, g32.A, g32.B, g32.C = runtime.F32, widen(g.A), widen(g.B), widen(g.C)
			call32, err := cublasArgs(g32)
			if err != nil {
				t.Fatal(err)
			}
			for e := range call.Batch {
				a, b, c := call.entry(e)
				a32, b32, c32 := call32.entry(e)
				for _, p := range [][2]uintptr{{a, a32}, {b, b32}, {c, c32}} {
					if widen(runtime.Ptr(p[0])) != runtime.Ptr(p[1]) {
						t.Fatalf("%s %+v: entry %d at %#x, want the f32 case's %#x halved", dt, g, e, p[0], p[1])
					}
				}
			}
			same := call
			same.DType, same.A, same.B, same.C = runtime.F32, widen(call.A), widen(call.B), widen(call.C)
			if same != call32 {
				t.Fatalf("%s: call %+v, want the f32 case's %+v", dt, call, call32)
			}
			runCublasArgsCase[float32](t, g32, 0)
		}
	}
}

// TestCublasArgsF32Out: a product of 16-bit operands with an f32 C
// (GemmArgs.F32Out) maps as the 16-bit case does for A and B, and as the
// f32 case does for C: cuBLAS gets the flag (cublasGemmEx's Ctype
// CUDA_R_32F), and each batch entry's C lies where the f32 case's does.
// F32Out with f32 or f64 operands is refused.
func TestCublasArgsF32Out(t *testing.T) {
	for _, dt := range []runtime.DType{runtime.BF16, runtime.F16} {
		for _, g := range gemmCases(dt) {
			if g.K == 0 {
				continue // cuBLAS reads neither A nor B: cublasArgs points them at C
			}
			g.F32Out = true
			g.C = widen(g.C) // C's elements are 4 bytes
			call, err := cublasArgs(g)
			if err != nil {
				t.Fatal(err)
			}
			if !call.F32Out || call.DType != dt {
				t.Fatalf("%s: call %+v, want F32Out with %s operands", dt, call, dt)
			}
			g32 := g
			g32.DType, g32.F32Out, g32.A, g32.B = runtime.F32, false, widen(g.A), widen(g.B)
			call32, err := cublasArgs(g32)
			if err != nil {
				t.Fatal(err)
			}
			for e := range call.Batch {
				a, b, c := call.entry(e)
				a32, b32, c32 := call32.entry(e)
				if widen(runtime.Ptr(a)) != runtime.Ptr(a32) || widen(runtime.Ptr(b)) != runtime.Ptr(b32) || c != c32 {
					t.Fatalf("%s %+v: entry %d at %#x %#x %#x, want %#x %#x %#x (A and B halved)", dt, g, e, a, b, c, a32, b32, c32)
				}
			}
		}
	}
	for _, dt := range []runtime.DType{runtime.F32, runtime.F64} {
		g := gemmCases(dt)[0]
		g.F32Out = true
		if _, err := cublasArgs(g); err == nil {
			t.Errorf("F32Out with %s operands was not refused", dt)
		}
	}
}

// TestRowMajorReferenceIsCPUGemm pins rowMajorGemm to runtime/cpu's Gemm,
// the backend the GPU results are compared with, on the same cases.
func TestRowMajorReferenceIsCPUGemm(t *testing.T) {
	dev, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, g := range gemmCases(runtime.F64) {
		n := (int(g.C)-fakeBase)/8 + spanC(g)
		rng := rand.New(rand.NewPCG(uint64(g.M), uint64(g.K)))
		host := make([]float64, n)
		for i := range host {
			host[i] = float64(rng.IntN(17) - 8)
		}
		p, err := dev.Alloc(int64(8 * n))
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.CopyToDevice(p, unsafe.Pointer(&host[0]), int64(8*n)); err != nil {
			t.Fatal(err)
		}
		dg := g
		dg.A, dg.B, dg.C = g.A-fakeBase+p, g.B-fakeBase+p, g.C-fakeBase+p
		if err := dev.Gemm(dg); err != nil {
			t.Fatal(err)
		}
		got := make([]float64, n)
		if err := dev.CopyToHost(unsafe.Pointer(&got[0]), p, int64(8*n)); err != nil {
			t.Fatal(err)
		}
		dev.Free(p)
		norm := g
		if err := normalizeGemm(&norm); err != nil {
			t.Fatal(err)
		}
		rowMajorGemm(norm, host)
		for i := range host {
			if got[i] != host[i] {
				t.Fatalf("%s: element %d: runtime/cpu %v, reference %v", fmt.Sprintf("%+v", g), i, got[i], host[i])
			}
		}
	}
}

// TestCublasArgsErrors: what cuBLAS would reject comes back as an error
// before any call.
func TestCublasArgsErrors(t *testing.T) {
	ok := runtime.GemmArgs{DType: runtime.F32, M: 2, N: 3, K: 4, A: fakeBase, B: fakeBase, C: fakeBase}
	for _, tc := range []struct {
		name string
		edit func(*runtime.GemmArgs)
	}{
		{"i32", func(g *runtime.GemmArgs) { g.DType = runtime.I32 }},
		{"negative M", func(g *runtime.GemmArgs) { g.M = -1 }},
		{"negative stride", func(g *runtime.GemmArgs) { g.StrideB = -1 }},
		{"short LDA", func(g *runtime.GemmArgs) { g.LDA = 3 }},
		{"short LDC", func(g *runtime.GemmArgs) { g.LDC = 2 }},
		{"null C", func(g *runtime.GemmArgs) { g.C = 0 }},
	} {
		g := ok
		tc.edit(&g)
		if _, err := cublasArgs(g); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if _, err := cublasArgs(ok); err != nil {
		t.Fatal(err)
	}
}
