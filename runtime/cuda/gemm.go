//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"gonum.org/v1/gonum/blas"
	cublas "gorgonia.org/cu/blas"

	"github.com/ngen-ml/ngen/runtime"
)

// Gemm computes C = alpha*op(A)*op(B) + beta*C in row-major order with
// cuBLAS, once per batch entry, with the semantics of runtime/cpu's Gemm.
// A leading dimension of 0 means the matrix is packed.
//
// cuBLAS is column-major, and a row-major M×N matrix with leading dimension
// ld is the same memory as a column-major N×M one. So row-major
// C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: call cuBLAS with the
// operands (and M, N) swapped and the transpose flags unchanged.
//
// cu/blas v0.9.6 has no strided-batched GEMM and no cublasSetStream, so a
// batch is a loop of calls on the legacy default stream, which the
// device's blocking stream is ordered with (docs/GPU.md).
func (d *Device) Gemm(g runtime.GemmArgs) error {
	if err := normalizeGemm(&g); err != nil {
		return d.closedOr(fmt.Errorf("cuda: gemm %s %dx%dx%d: %v", g.DType, g.M, g.N, g.K, err))
	}
	if g.M == 0 || g.N == 0 {
		return d.closedOr(nil)
	}
	if g.K == 0 {
		// cuBLAS reads neither A nor B, but cu/blas takes &a[0].
		g.A, g.B = g.C, g.C
	}
	ta, tb := blasOp(g.TransA), blasOp(g.TransB)
	es := uintptr(g.DType.Size())
	// Timed on the device's stream: cuBLAS's legacy stream is ordered with
	// it, so the pair of events brackets the whole batch.
	return d.do(func() error {
		return d.timer.around(d.stream, "gemm", func() error { return d.gemmBatch(g, ta, tb, es) })
	})
}

// gemmBatch enqueues g on the device thread.
func (d *Device) gemmBatch(g runtime.GemmArgs, ta, tb blas.Transpose, es uintptr) error {
	for i := range g.Batch {
		a := uintptr(g.A) + uintptr(i*g.StrideA)*es
		b := uintptr(g.B) + uintptr(i*g.StrideB)*es
		c := uintptr(g.C) + uintptr(i*g.StrideC)*es
		if g.DType == runtime.F32 {
			d.blas.Sgemm(tb, ta, g.N, g.M, g.K, float32(g.Alpha), devSlice[float32](b), g.LDB,
				devSlice[float32](a), g.LDA, float32(g.Beta), devSlice[float32](c), g.LDC)
		} else {
			d.blas.Dgemm(tb, ta, g.N, g.M, g.K, g.Alpha, devSlice[float64](b), g.LDB,
				devSlice[float64](a), g.LDA, g.Beta, devSlice[float64](c), g.LDC)
		}
		if err := d.blas.Err(); err != nil {
			// cu/blas keeps the first error and skips every later
			// call; a fresh handle makes the device usable again.
			d.resetBLAS()
			return fmt.Errorf("cuda: gemm %s %dx%dx%d batch entry %d: %v", g.DType, g.M, g.N, g.K, i, err)
		}
	}
	return nil
}

// resetBLAS replaces the cuBLAS handle, on the device thread.
func (d *Device) resetBLAS() {
	d.blas.Close()
	fresh := new(cublas.Standard)
	if err := fresh.Init(); err == nil {
		d.blas = fresh
	}
}

func blasOp(t runtime.Transpose) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

// devSlice views device address p as a one-element slice, because cu/blas
// takes Go slices and passes &s[0] to cuBLAS. The memory is never touched
// from Go, and the collector ignores addresses outside its heap.
func devSlice[T float32 | float64](p uintptr) []T {
	return unsafe.Slice((*T)(unsafe.Add(nil, p)), 1)
}

// normalizeGemm fills in defaults and checks what cuBLAS would otherwise
// reject with a bare status code (or cu/blas with a panic).
func normalizeGemm(g *runtime.GemmArgs) error {
	if g.DType != runtime.F32 && g.DType != runtime.F64 {
		return fmt.Errorf("dtype %s not supported, want f32 or f64", g.DType)
	}
	if g.M < 0 || g.N < 0 || g.K < 0 || g.Batch < 0 {
		return fmt.Errorf("negative size (batch %d)", g.Batch)
	}
	if g.StrideA < 0 || g.StrideB < 0 || g.StrideC < 0 {
		return fmt.Errorf("negative batch stride (%d, %d, %d)", g.StrideA, g.StrideB, g.StrideC)
	}
	if g.Batch == 0 {
		g.Batch = 1
	}
	// Stored shapes: A is M×K (K×M transposed), B is K×N (N×K), C is M×N.
	colsA, colsB := g.K, g.N
	if g.TransA {
		colsA = g.M
	}
	if g.TransB {
		colsB = g.K
	}
	for _, ld := range []struct {
		name string
		v    *int
		min  int
	}{{"LDA", &g.LDA, colsA}, {"LDB", &g.LDB, colsB}, {"LDC", &g.LDC, g.N}} {
		if *ld.v == 0 {
			*ld.v = max(ld.min, 1)
		}
		if *ld.v < max(ld.min, 1) {
			return fmt.Errorf("%s = %d, want >= %d", ld.name, *ld.v, max(ld.min, 1))
		}
		if *ld.v > math.MaxInt32 {
			return fmt.Errorf("%s = %d exceeds cuBLAS's int", ld.name, *ld.v)
		}
	}
	if g.M > math.MaxInt32 || g.N > math.MaxInt32 || g.K > math.MaxInt32 {
		return fmt.Errorf("size exceeds cuBLAS's int")
	}
	if g.M > 0 && g.N > 0 && (g.C == 0 || (g.K > 0 && (g.A == 0 || g.B == 0))) {
		return fmt.Errorf("null matrix pointer")
	}
	return nil
}
