//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/runtime"
)

// Gemm computes C = alpha*op(A)*op(B) + beta*C in row-major order with
// cuBLAS, with the semantics of runtime/cpu's Gemm. A leading dimension of
// 0 means the matrix is packed. A batch is one strided-batched call, or
// two for a batch summed into one C (runtime.LowerGemm, gemm_calls.go),
// on the device's stream through the shim (shim.go, which also holds the
// row-major to column-major mapping).
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
	// Recorded into the step's CUDA graph, or issued now (graph.go).
	return d.doCall(streamCall{kind: callGemm, gemm: g})
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
