package jit

import (
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
)

func init() {
	composites["batch_matmul"] = struct {
		build func(b *irtest.Builder, attrs ir.Attrs, args []*ir.Value) *ir.Value
		uses  []string
	}{func(b *irtest.Builder, a ir.Attrs, x []*ir.Value) *ir.Value {
		return ops.BatchMatMul(b.Builder, x[0], x[1], a.TransA, a.TransB)
	}, []string{"matmul", "broadcast"}}
	for _, name := range []string{"rnn_tanh", "rnn_relu", "lstm", "rnn_tanh_zero", "lstm_zero", "rnn_relu_masked", "lstm_masked"} {
		cell, zero := strings.CutSuffix(name, "_zero")
		cell, masked := strings.CutSuffix(cell, "_masked")
		composites[name] = struct {
			build func(b *irtest.Builder, attrs ir.Attrs, args []*ir.Value) *ir.Value
			uses  []string
		}{func(b *irtest.Builder, a ir.Attrs, x []*ir.Value) *ir.Value {
			var h0, c0, mask *ir.Value // zero initial states: none given
			if masked {
				mask, x = x[len(x)-1], x[:len(x)-1]
			}
			if !zero {
				h0 = x[5]
				if len(x) > 6 {
					c0 = x[6]
				}
			}
			out, hn, cn := ops.MaskedRecurrent(b.Builder, cell, x[0], x[1], x[2], x[3], x[4], h0, c0, mask)
			if b.Err != nil {
				return out
			}
			parts := []*ir.Value{out, hn}
			if cn != nil {
				parts = append(parts, cn)
			}
			for i, p := range parts {
				parts[i] = b.Op("reshape", ir.Attrs{Shape: ir.Static(int(p.Shape.Size().N))}, p)
			}
			return b.Op("concat", ir.Attrs{Axes: []int{0}}, parts...)
		}, []string{"rnn_scan", "rnn_scan_bwd", "matmul", "add", "slice", "concat", "reshape"}}
	}
}

// seqCases cover the sequence ops on odd shapes: embeddings with repeated
// ids (their gradient rows add up), permutations of rank 2 to 4, slices of
// the first, middle and last axis, concatenation of two and three
// operands, and batched GEMMs over two leading dimensions, with and
// without broadcasting between them.
func seqCases() []opCase {
	return []opCase{
		// 3x5 ids over a vocabulary of 7: some rows repeat, some never occur.
		{name: "embedding_7x4_3x5", op: "embedding", args: []opArg{f(7, 4), labels(7, 3, 5)}},
		{name: "embedding_5x9_2x3x2", op: "embedding", args: []opArg{f(5, 9), labels(5, 2, 3, 2)}},
		{name: "permute_3x5_10", op: "permute", attrs: ir.Attrs{Perm: []int{1, 0}}, args: []opArg{f(3, 5)}},
		{name: "permute_2x3x7_102", op: "permute", attrs: ir.Attrs{Perm: []int{1, 0, 2}}, args: []opArg{f(2, 3, 7)}},
		{name: "permute_2x3x5x4_2031", op: "permute", attrs: ir.Attrs{Perm: []int{2, 0, 3, 1}}, args: []opArg{f(2, 3, 5, 4)}},
		{name: "slice_5x3_ax0", op: "slice", attrs: ir.Attrs{Axes: []int{0}, Ints: []int{1, 4}}, args: []opArg{f(5, 3)}},
		{name: "slice_2x7x3_ax1", op: "slice", attrs: ir.Attrs{Axes: []int{1}, Ints: []int{2, 7}}, args: []opArg{f(2, 7, 3)}},
		{name: "slice_2x3x9_last", op: "slice", attrs: ir.Attrs{Axes: []int{-1}, Ints: []int{4, 5}}, args: []opArg{f(2, 3, 9)}},
		{name: "concat_ax0", op: "concat", attrs: ir.Attrs{Axes: []int{0}}, args: []opArg{f(2, 3), f(3, 3)}},
		{name: "concat_ax1_3", op: "concat", attrs: ir.Attrs{Axes: []int{1}}, args: []opArg{f(2, 1, 5), f(2, 3, 5), f(2, 2, 5)}},
		{name: "concat_last", op: "concat", attrs: ir.Attrs{Axes: []int{-1}}, args: []opArg{f(3, 2, 4), f(3, 2, 3)}},
		{name: "bmm_2x3x4x5", op: "batch_matmul", args: []opArg{f(2, 3, 4, 5), f(2, 3, 5, 2)}},
		{name: "bmm_bcast_2x1x3x4_5x4x2", op: "batch_matmul", args: []opArg{f(2, 1, 3, 4), f(5, 4, 2)}},
		{name: "bmm_bcast_tt", op: "batch_matmul", attrs: ir.Attrs{TransA: true, TransB: true}, args: []opArg{f(3, 1, 4, 3), f(1, 2, 5, 4)}},
	}
}

// recurCases run one layer of each cell over odd sizes (batch 3, T 7,
// input 5, hidden 4 or 6) from non-zero initial states, and a one-step
// sequence, where h_{t-1} is h0 alone.
func recurCases() []opCase {
	rnn := func(name, cell string, b, t, e, h int) opCase {
		return opCase{name: name, op: cell, args: []opArg{f(b, t, e), f(h, e), f(h, h), f(h), f(h), f(b, h)}}
	}
	lstm := func(name string, b, t, e, h int) opCase {
		return opCase{name: name, op: "lstm", args: []opArg{f(b, t, e), f(4*h, e), f(4*h, h), f(4 * h), f(4 * h), f(b, h), f(b, h)}}
	}
	return []opCase{
		rnn("rnn_tanh_3x7x5_h4", "rnn_tanh", 3, 7, 5, 4),
		rnn("rnn_relu_3x7x5_h6", "rnn_relu", 3, 7, 5, 6),
		rnn("rnn_tanh_t1", "rnn_tanh", 2, 1, 3, 4),
		lstm("lstm_3x7x5_h4", 3, 7, 5, 4),
		lstm("lstm_2x1x3_h6", 2, 1, 3, 6),
		// No initial states: zeros, whose step the W_hh gradient leaves out.
		{name: "rnn_tanh_zero_3x5x4_h5", op: "rnn_tanh_zero", args: []opArg{f(3, 5, 4), f(5, 4), f(5, 5), f(5), f(5)}},
		{name: "lstm_zero_2x4x3_h5", op: "lstm_zero", args: []opArg{f(2, 4, 3), f(20, 3), f(20, 5), f(20), f(20)}},
		{name: "lstm_zero_t1", op: "lstm_zero", args: []opArg{f(2, 1, 3), f(12, 3), f(12, 3), f(12), f(12)}},
		// Random step masks (0: no token, the state carries over).
		{name: "rnn_relu_masked_3x6x4_h5", op: "rnn_relu_masked", args: []opArg{f(3, 6, 4), f(5, 4), f(5, 5), f(5), f(5), f(3, 5), labels(2, 3, 6)}},
		{name: "lstm_masked_3x6x4_h5", op: "lstm_masked", args: []opArg{f(3, 6, 4), f(20, 4), f(20, 5), f(20), f(20), f(3, 5), f(3, 5), labels(2, 3, 6)}},
		// W_hh of at least ops.SteppedMinBytes: the GPU form is the
		// stepped one (a time step a launch; tiles of 8 units and 32
		// sequences, partial here, and a batch of two tiles).
		// Weights scaled by 1/√fan-in, so that 96-term products keep
		// the pre-activations near 1 as a real layer's do.
		{name: "rnn_tanh_34x4x3_h93", op: "rnn_tanh", args: []opArg{f(34, 4, 3), fd(fanIn, 93, 3), fd(fanIn, 93, 93), f(93), f(93), f(34, 93)}},
		{name: "lstm_9x5x4_h48", op: "lstm", args: []opArg{f(9, 5, 4), fd(fanIn, 192, 4), fd(fanIn, 192, 48), f(192), f(192), f(9, 48), f(9, 48)}},
		{name: "lstm_zero_2x4x3_h48", op: "lstm_zero", args: []opArg{f(2, 4, 3), fd(fanIn, 192, 3), fd(fanIn, 192, 48), f(192), f(192)}},
		{name: "rnn_relu_masked_10x5x3_h96", op: "rnn_relu_masked", args: []opArg{f(10, 5, 3), fd(fanIn, 96, 3), fd(fanIn, 96, 96), f(96), f(96), f(10, 96), labels(2, 10, 5)}},
		{name: "lstm_masked_3x6x4_h48", op: "lstm_masked", args: []opArg{f(3, 6, 4), fd(fanIn, 192, 4), fd(fanIn, 192, 48), f(192), f(192), f(3, 48), f(3, 48), labels(2, 3, 6)}},
	}
}
