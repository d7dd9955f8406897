package jit

import (
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// The vision ops are tested through the compositions the DSL lowers
// them to, against the PyTorch functions they stand for: conv2d
// (im2col + GEMM + bias), max_pool2d (argmax + pick) and batch_norm2d
// (reductions and elementwise ops, with where_train choosing batch
// statistics).
// A case whose op names a composite below builds it; the rest of the
// harness (oracle, gradient check, fused and unfused) is shared.

// composites expands pseudo-ops; uses lists the IR ops each one covers
// (for TestOpCoverage).
var composites = map[string]struct {
	build func(b *irtest.Builder, attrs ir.Attrs, args []*ir.Value) *ir.Value
	uses  []string
}{
	"conv2d": {func(b *irtest.Builder, a ir.Attrs, x []*ir.Value) *ir.Value {
		var bias *ir.Value
		if len(x) > 2 {
			bias = x[2]
		}
		return ops.Conv2d(b.Builder, x[0], x[1], bias, window(a))
	}, []string{"im2col", "col2im", "matmul", "reshape", "broadcast", "add"}},
	"max_pool2d": {func(b *irtest.Builder, a ir.Attrs, x []*ir.Value) *ir.Value {
		return ops.MaxPool2d(b.Builder, x[0], window(a))
	}, []string{"maxpool_argmax", "maxpool_pick", "maxpool_bwd"}},
	// A ReLU before the layer: the fused plan computes the ReLU backward
	// in the kernel of maxpool_bwd, avgpool_bwd or col2im (TestConvFusion
	// checks that it does), so these cases hold those kernels to torch.
	"relu_max_pool2d": {func(b *irtest.Builder, a ir.Attrs, x []*ir.Value) *ir.Value {
		return ops.MaxPool2d(b.Builder, b.Unary("relu", x[0]), window(a))
	}, []string{"relu", "maxpool_argmax", "maxpool_pick", "maxpool_bwd"}},
	"relu_avgpool": {func(b *irtest.Builder, a ir.Attrs, x []*ir.Value) *ir.Value {
		return b.Op("avgpool", a, b.Unary("relu", x[0]))
	}, []string{"relu", "avgpool", "avgpool_bwd"}},
	"relu_conv2d": {func(b *irtest.Builder, a ir.Attrs, x []*ir.Value) *ir.Value {
		return ops.Conv2d(b.Builder, b.Unary("relu", x[0]), x[1], x[2], window(a))
	}, []string{"relu", "im2col", "col2im", "matmul", "reshape", "add"}},
	// Training mode: batch statistics (running statistics are checked on
	// the generated model in models/convnet).
	"batch_norm2d": {func(b *irtest.Builder, a ir.Attrs, x []*ir.Value) *ir.Value {
		c := x[0].Shape[1]
		fill := func(v float64) *ir.Value {
			return b.Op("fill", ir.Attrs{F: v, Shape: ir.Shape{c}, Str: x[0].DType.String()})
		}
		y, _, _ := ops.BatchNorm2d(b.Builder, x[0], x[1], x[2], fill(0), fill(1), 0.1, 1e-5)
		return y
	}, []string{"mean", "sub", "square", "relu", "addc", "powc", "where_train", "mul", "add"}},
	// where_train in training mode (the harness's) is its first operand.
	"where_train": {func(b *irtest.Builder, a ir.Attrs, x []*ir.Value) *ir.Value {
		return b.Op("where_train", a, x[0], x[1])
	}, []string{"where_train"}},
}

func window(a ir.Attrs) ops.Window {
	i := a.Ints
	return ops.Window{KH: i[0], KW: i[1], SH: i[2], SW: i[3], PH: i[4], PW: i[5], DH: i[6], DW: i[7], G: i[8]}
}

// buildCase applies c's op (or composite) to args.
func buildCase(b *irtest.Builder, c opCase, args []*ir.Value) *ir.Value {
	if comp, ok := composites[c.op]; ok {
		return comp.build(b, c.attrs, args)
	}
	return b.Op(c.op, c.attrs, args...)
}

// win is a window attribute: kernel, stride, padding, dilation, groups.
func win(kh, kw, s, p, d, g int) ir.Attrs {
	return ir.Attrs{Ints: ops.Window{KH: kh, KW: kw, SH: s, SW: s, PH: p, PW: p, DH: d, DW: d, G: g}.Ints()}
}

// visionCases cover stride 2, padding 0/1/2, dilation 2, groups 2, a
// non-square input and kernel, overlapping windows and batch 1.
func visionCases() []opCase {
	return []opCase{
		{name: "conv_b2_c3_7x5_k3", op: "conv2d", attrs: win(3, 3, 1, 0, 1, 1), args: []opArg{f(2, 3, 7, 5), f(4, 3, 3, 3), f(4)}},
		{name: "conv_pad1", op: "conv2d", attrs: win(3, 3, 1, 1, 1, 1), args: []opArg{f(2, 2, 6, 6), f(3, 2, 3, 3), f(3)}},
		{name: "conv_stride2_pad2", op: "conv2d", attrs: win(3, 3, 2, 2, 1, 1), args: []opArg{f(2, 2, 7, 6), f(3, 2, 3, 3), f(3)}},
		{name: "conv_dil2", op: "conv2d", attrs: win(3, 3, 1, 1, 2, 1), args: []opArg{f(1, 2, 8, 7), f(2, 2, 3, 3)}},
		{name: "conv_groups2", op: "conv2d", attrs: win(3, 3, 1, 1, 1, 2), args: []opArg{f(2, 4, 5, 6), f(6, 2, 3, 3), f(6)}},
		{name: "conv_batch1_k1", op: "conv2d", attrs: win(1, 1, 1, 0, 1, 1), args: []opArg{f(1, 3, 4, 5), f(2, 3, 1, 1), f(2)}},
		{name: "conv_groups2_dil2_s2_nobias", op: "conv2d", attrs: win(3, 3, 2, 1, 2, 2), args: []opArg{f(2, 4, 9, 8), f(4, 2, 3, 3)}},
		{name: "conv_k3x2_s2_pad1", op: "conv2d", attrs: win(3, 2, 2, 1, 1, 1), args: []opArg{f(2, 3, 5, 4), f(4, 3, 3, 2), f(4)}},
		{name: "maxpool_2", op: "max_pool2d", attrs: win(2, 2, 2, 0, 1, 1), args: []opArg{fd(distinct, 2, 3, 6, 4)}},
		{name: "maxpool_2_floor", op: "max_pool2d", attrs: win(2, 2, 2, 0, 1, 1), args: []opArg{fd(distinct, 2, 2, 7, 5)}},
		{name: "maxpool_3_s2_p1", op: "max_pool2d", attrs: win(3, 3, 2, 1, 1, 1), args: []opArg{fd(distinct, 1, 2, 7, 5)}},
		{name: "maxpool_dil2", op: "max_pool2d", attrs: win(2, 2, 1, 0, 2, 1), args: []opArg{fd(distinct, 2, 2, 5, 6)}},
		{name: "maxpool_5_s2_p2", op: "max_pool2d", attrs: win(5, 5, 2, 2, 1, 1), args: []opArg{fd(distinct, 2, 2, 7, 6)}},
		{name: "maxpool_3_s1_overlap", op: "max_pool2d", attrs: win(3, 3, 1, 0, 1, 1), args: []opArg{fd(distinct, 1, 2, 5, 6)}},
		{name: "avgpool_2", op: "avgpool", attrs: win(2, 2, 2, 0, 1, 1), args: []opArg{f(2, 3, 6, 4)}},
		{name: "avgpool_3_s2_p1", op: "avgpool", attrs: win(3, 3, 2, 1, 1, 1), args: []opArg{f(1, 2, 7, 5)}},
		{name: "avgpool_5_s2_p2", op: "avgpool", attrs: win(5, 5, 2, 2, 1, 1), args: []opArg{f(2, 2, 7, 6)}},
		{name: "avgpool_3x2_p1", op: "avgpool", attrs: win(3, 2, 1, 1, 1, 1), args: []opArg{f(1, 3, 5, 6)}},
		// distinct data of odd size never holds 0, the ReLU's kink.
		{name: "relu_maxpool_3_s2_p1", op: "relu_max_pool2d", attrs: win(3, 3, 2, 1, 1, 1), args: []opArg{fd(distinct, 1, 3, 7, 5)}},
		{name: "relu_avgpool_3_s2_p1", op: "relu_avgpool", attrs: win(3, 3, 2, 1, 1, 1), args: []opArg{fd(awayFrom0, 2, 2, 7, 5)}},
		{name: "relu_conv_s2_dil2_g2", op: "relu_conv2d", attrs: win(3, 3, 2, 2, 2, 2), args: []opArg{fd(awayFrom0, 2, 4, 7, 6), f(4, 2, 3, 3), f(4)}},
		{name: "where_train_3x4", op: "where_train", args: []opArg{f(3, 4), f(3, 4)}},
		{name: "batchnorm_3x5x7x4", op: "batch_norm2d", args: []opArg{f(3, 5, 7, 4), f(5), f(5)}},
		{name: "batchnorm_2x3x1x5", op: "batch_norm2d", args: []opArg{f(2, 3, 1, 5), f(3), f(3)}},
	}
}
