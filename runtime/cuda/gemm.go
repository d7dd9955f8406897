//go:build cuda

package cuda

import (
	"fmt"
	"unsafe"

	"gonum.org/v1/gonum/blas"
	cublas "gorgonia.org/cu/blas"

	"github.com/ngen-ml/ngen/runtime"
)

// Gemm computes C = alpha*op(A)*op(B) + beta*C in row-major order with
// cuBLAS, once per batch entry, with the semantics of runtime/cpu's Gemm.
// A leading dimension of 0 means the matrix is packed. cublasArgs
// (gemmargs.go) maps it to cuBLAS's column-major arguments.
//
// cu/blas v0.9.6 has no strided-batched GEMM and no cublasSetStream, so a
// batch is a loop of calls on the legacy default stream, which the
// device's blocking stream is ordered with (docs/GPU.md).
func (d *Device) Gemm(g runtime.GemmArgs) error {
	call, err := cublasArgs(g) // gemmargs.go, tested without a GPU
	if err != nil {
		return d.closedOr(fmt.Errorf("cuda: gemm %s %dx%dx%d: %v", g.DType, g.M, g.N, g.K, err))
	}
	if call.M == 0 || call.N == 0 {
		return d.closedOr(nil)
	}
	// Timed on the device's stream: cuBLAS's legacy stream is ordered with
	// it, so the pair of events brackets the whole batch.
	return d.do(func() error {
		return d.timer.around(d.stream, "gemm", func() error { return d.gemmBatch(g, call) })
	})
}

// gemmBatch enqueues call, which cublasArgs built from g, on the device
// thread.
func (d *Device) gemmBatch(g runtime.GemmArgs, call cublasCall) error {
	ta, tb := blasOp(call.TransA), blasOp(call.TransB)
	for i := range call.Batch {
		a, b, c := call.entry(i)
		if call.DType == runtime.F32 {
			d.blas.Sgemm(ta, tb, call.M, call.N, call.K, float32(call.Alpha), devSlice[float32](a), call.LDA,
				devSlice[float32](b), call.LDB, float32(call.Beta), devSlice[float32](c), call.LDC)
		} else {
			d.blas.Dgemm(ta, tb, call.M, call.N, call.K, call.Alpha, devSlice[float64](a), call.LDA,
				devSlice[float64](b), call.LDB, call.Beta, devSlice[float64](c), call.LDC)
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

func blasOp(t bool) blas.Transpose {
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
