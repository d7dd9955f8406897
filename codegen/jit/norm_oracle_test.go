package jit

import "github.com/ngen-ml/ngen/compiler/ir"

// normCases cover LayerNorm over the last axis (2-D and 3-D, rows whose
// mean is 30 times their spread, a row of 37 that leaves a ragged lane
// pass) and softmax along the first, a middle and the last axis, with
// causal and key-padding masks (random padding: some rows end up fully
// masked, whose defined result is zeros).
func normCases() []opCase {
	eps := ir.Attrs{F: 1e-5}
	return []opCase{
		{name: "layernorm_3x5", op: "layernorm", attrs: eps, args: []opArg{f(3, 5), f(5), f(5)}},
		{name: "layernorm_2x7x12", op: "layernorm", attrs: eps, args: []opArg{f(2, 7, 12), f(12), f(12)}},
		{name: "layernorm_offset_2x3x37", op: "layernorm", attrs: ir.Attrs{F: 1e-3}, args: []opArg{fd(offset, 2, 3, 37), f(37), f(37)}},
		// Row groups of the backward (lnRowGroup): 12 rows as 2 groups of
		// 6, 16 as 2 of 8, and 11 (prime) as 11 of 1.
		{name: "layernorm_groups_2x12x10", op: "layernorm", attrs: eps, args: []opArg{f(2, 12, 10), f(10), f(10)}},
		{name: "layernorm_groups_3x2x8x6", op: "layernorm", attrs: eps, args: []opArg{f(3, 2, 8, 6), f(6), f(6)}},
		{name: "layernorm_groups_2x11x9", op: "layernorm", attrs: eps, args: []opArg{f(2, 11, 9), f(9), f(9)}},
		// The fused residual form layernorm(h, b, r, γ, β) = LN(r + (h + b)).
		{name: "layernorm_residual_2x16x12", op: "layernorm", attrs: eps, args: []opArg{f(2, 16, 12), f(12), f(2, 16, 12), f(12), f(12)}},
		{name: "layernorm_residual_2x7x12", op: "layernorm", attrs: eps, args: []opArg{f(2, 7, 12), f(12), f(2, 7, 12), f(12), f(12)}},
		{name: "softmax_3x5_ax0", op: "softmax", attrs: ir.Attrs{Axes: []int{0}}, args: []opArg{f(3, 5)}},
		{name: "softmax_2x7x3_mid", op: "softmax", attrs: ir.Attrs{Axes: []int{1}}, args: []opArg{f(2, 7, 3)}},
		{name: "softmax_2x3x40_last", op: "softmax", attrs: ir.Attrs{Axes: []int{-1}}, args: []opArg{f(2, 3, 40)}},
		{name: "softmax_causal_2x3x6x6", op: "softmax", attrs: ir.Attrs{Axes: []int{-1}, Str: "causal"}, args: []opArg{f(2, 3, 6, 6)}},
		{name: "softmax_padded_3x2x4x5", op: "softmax", attrs: ir.Attrs{Axes: []int{3}}, args: []opArg{f(3, 2, 4, 5), labels(2, 3, 5)}},
		{name: "softmax_causal_padded_4x2x5x5", op: "softmax", attrs: ir.Attrs{Axes: []int{-1}, Str: "causal"}, args: []opArg{f(4, 2, 5, 5), labels(2, 4, 5)}},
	}
}
