//go:build cuda

package cuda

import (
	"fmt"

	"github.com/ngen-ml/ngen/runtime"
)

// Gemm computes C = alpha*op(A)*op(B) + beta*C in row-major order with
// cuBLAS, with the semantics of runtime/cpu's Gemm. A leading dimension of
// 0 means the matrix is packed. A batch is one strided-batched call, or
// two for a batch summed into one C (runtime.LowerGemm, gemm_calls.go),
// on the device's stream through the shim (shim.go). Each call's
// column-major arguments come from cublasArgs (gemmargs.go), which is
// tested without a GPU.
func (d *Device) Gemm(g runtime.GemmArgs) error {
	if err := normalizeGemm(&g); err != nil {
		return d.closedOr(fmt.Errorf("cuda: gemm %s %dx%dx%d: %v", g.DType, g.M, g.N, g.K, err))
	}
	if g.M == 0 || g.N == 0 {
		return d.closedOr(nil)
	}
	if g.K == 0 {
		// cuBLAS reads neither A nor B; give it valid pointers.
		g.A, g.B = g.C, g.C
	}
	// Recorded into the step's CUDA graph, or issued now (graph.go).
	return d.doCall(streamCall{kind: callGemm, gemm: g})
}
