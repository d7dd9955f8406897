package irtest

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
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

// DeepLSTM is a stack of layers LSTM layers of width hidden over sequences
// of T steps of in features, classifying from the last layer's final
// state with cross-entropy, Adam. With segment > 0 the layers are
// checkpointed in runs of segment layers, all but the last run.
func DeepLSTM(dt ir.DType, T, in, hidden, layers, classes int, segment int) *ir.Model {
	b := New()
	x := b.Input("x", dt, ir.S("B"), ir.D(T), ir.D(in))
	y := b.Input("y", ir.I32, ir.S("B"))
	h := x
	var hn *ir.Value
	for l := 0; l < layers; l++ {
		start := len(b.F.Values)
		e := h.Shape[2].N
		k := 1 / math.Sqrt(float64(hidden))
		p := func(n string, s ...int) *ir.Value { return b.Param(fmt.Sprintf("lstm%d.%s", l+1, n), dt, k, s...) }
		h, hn, _ = ops.Recurrent(b.Builder, "lstm", h, p("weight_ih", 4*hidden, e), p("weight_hh", 4*hidden, hidden), p("bias_ih", 4*hidden), p("bias_hh", 4*hidden), nil, nil)
		if segment > 0 && l/segment < (layers-1)/segment {
			for _, v := range b.F.Values[start:] {
				v.Checkpoint = l/segment + 1
			}
		}
	}
	logits := b.Linear("out", hn, classes)
	return b.Model(fmt.Sprintf("lstm%d", layers), b.Binary("cross_entropy", logits, y), logits, Adam)
}
