package irtest

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// DeepMLP is in → layers hidden layers of width ReLU (Dropout) → classes
// with cross-entropy: the model of the checkpointing tests and figures.
// With segment > 0, the hidden layers are checkpointed in runs of
// segment layers (checkpoint segments 1, 2, ...) but the last, as dsl's
// Model.Checkpoint marks them.
func DeepMLP(dt ir.DType, in, width, layers, classes int, dropout float64, opt ir.Optimizer, segment int) *ir.Model {
	b := New()
	x := b.Input("x", dt, ir.S("B"), ir.D(in))
	y := b.Input("y", ir.I32, ir.S("B"))
	h := x
	for l := 0; l < layers; l++ {
		start := len(b.F.Values)
		h = b.Unary("relu", b.Linear(fmt.Sprintf("fc%d", l+1), h, width))
		if dropout > 0 {
			h = b.Op("dropout", ir.Attrs{F: dropout, I: l + 1}, h)
		}
		// The last run of layers is left alone: its backward follows at
		// once, so recomputing it would save nothing.
		if segment > 0 && l/segment < (layers-1)/segment {
			for _, v := range b.F.Values[start:] {
				v.Checkpoint = l/segment + 1
			}
		}
	}
	logits := b.Linear("out", h, classes)
	return b.Model(fmt.Sprintf("deep%d", layers), b.Binary("cross_entropy", logits, y), logits, opt)
}
