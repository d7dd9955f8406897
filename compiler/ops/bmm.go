package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// BatchMatMul lowers torch.matmul with leading (batch) dimensions that
// broadcast against each other in any way, e.g. [2,1,3,4] × [5,4,6], onto
// the GEMM step, which batches over the result's leading dimensions with
// each operand either carrying all of them or none (shared). An operand
// whose batch dimensions are a proper broadcast is expanded first; the
// broadcast's gradient sums back over what it expanded. The DSL's
// BatchMatMul and the op tests share it.
func BatchMatMul(b *Builder, x, y *ir.Value, transA, transB bool) *ir.Value {
	attrs := ir.Attrs{TransA: transA, TransB: transB}
	s, _, err := matmulInfer(&ir.Value{Op: "matmul", Args: []*ir.Value{x, y}, Attrs: attrs})
	if err != nil {
		return layerError(b, "batch_matmul", x, fmt.Errorf("%v", err))
	}
	batch := s[:len(s)-2]
	expand := func(a *ir.Value) *ir.Value {
		ab := a.Shape[:len(a.Shape)-2]
		if len(ab) == 0 || ab.Eq(batch) {
			return a
		}
		to := append(batch.Clone(), a.Shape[len(a.Shape)-2:]...)
		return b.Op("broadcast", ir.Attrs{Shape: to}, a)
	}
	return b.Op("matmul", attrs, expand(x), expand(y))
}
