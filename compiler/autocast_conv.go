package compiler

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Convolutions under mixed precision (autocast's part for the vision ops;
// autocast.go calls in here).
//
// A convolution is lowered to im2col, a batched GEMM of the weight with
// the columns, and the bias add (ops.Conv2d). torch.autocast runs conv2d
// on its lower-precision list: input, weight and bias in the half type H,
// the product accumulated in f32, the output in H. So:
//
//   - im2col takes its input in H: the columns, the largest buffer of a
//     convolution, are stored in H, and the GEMM (matmul's case in
//     autocast) reads them and the weight in H;
//   - the bias add of the GEMM's result and a view of a parameter takes
//     the bias in H (biasOfConv), as autocast casts conv2d's bias;
//   - max and average pooling keep their input's type: max_pool2d and
//     avg_pool2d are on neither of autocast's lists, so PyTorch runs them
//     in whatever type reaches them (H after a convolution and a ReLU).
//     The argmax is i32 either way.
//
// BatchNorm is a composition of reductions and elementwise ops with the
// f32 running statistics (ops.BatchNorm2d): its statistics read f32 (the
// reductions' default) and its affine output computes in f32 from the
// widened H input; that output is then stored in H (batchNormOutput), as
// PyTorch's batch_norm returns its input's type, so the ReLU and pooling
// after it run in H as after a plain convolution.
//
// Autodiff follows: col2im, maxpool_bwd and avgpool_bwd read H
// gradients and write H, and a convolution's weight gradient is the H
// product per sample summed over the batch (compiler/fuse.go's
// batchSum leaves a 16-bit product and its sum apart, so fused and
// -fuse=none round the same values).

// convKeepsType reports whether op is a vision op that autocast leaves
// in its input's type: the pooling ops.
func convKeepsType(op string) bool {
	switch op {
	case "maxpool_argmax", "maxpool_pick", "avgpool":
		return true
	}
	return false
}

// convDTypes checks that every convolution of f can run in h: its
// columns must be f32 before the cast (an f64 convolution cannot be
// autocast; an integer one is no convolution). The error names the
// convolution's line.
func convDTypes(f *ir.Func, pr *ir.Precision) error {
	for _, v := range f.Values {
		if v.Op == "im2col" && v.Args[0].DType != ir.F32 {
			return fmt.Errorf("conv2d (%s): mixed precision (%s, %s) needs an f32 convolution, its input is %s", v.Pos, pr.Type, pr.SetBy(), v.Args[0].Type())
		}
	}
	return nil
}

// biasOfConv reports whether args are a view of an H GEMM that reads
// im2col's columns and a view of a parameter: a convolution's bias add,
// whose bias autocast casts to H as conv2d's.
func biasOfConv(args []*ir.Value, h ir.DType) bool {
	view := func(v *ir.Value) *ir.Value {
		for v.Op == "reshape" || v.Op == "flat" {
			v = v.Args[0]
		}
		return v
	}
	conv := func(v *ir.Value) bool {
		v = view(v)
		if v.Op != "matmul" || v.DType != h {
			return false
		}
		for _, a := range v.Args {
			if a.Op == "im2col" {
				return true
			}
		}
		return false
	}
	param := func(v *ir.Value) bool { return view(v).Role == ir.Param }
	return conv(args[0]) && param(args[1]) || conv(args[1]) && param(args[0])
}

// batchNormOutput reports whether v is the output of ops.BatchNorm2d's
// composition over an H input, after autocast typed it: the f32 add of
// (x − running mean)·scale and a per-channel shift, where x is the
// widened H activation. autocast stores it in H.
func batchNormOutput(v *ir.Value, h ir.DType) bool {
	if v.Op != "add" || v.DType != ir.F32 || len(v.Args) != 2 || len(v.Shape) != 4 {
		return false
	}
	mul := v.Args[0]
	if mul.Op != "mul" || len(mul.Args) != 2 || !mul.Shape.Eq(v.Shape) || !perChannel(v.Args[1].Shape, v.Shape) {
		return false
	}
	sub := mul.Args[0]
	if sub.Op != "sub" || len(sub.Args) != 2 || !sub.Shape.Eq(v.Shape) || !perChannel(mul.Args[1].Shape, v.Shape) || !perChannel(sub.Args[1].Shape, v.Shape) {
		return false
	}
	x := sub.Args[0]
	return x.Op == "cast" && x.DType == ir.F32 && x.Args[0].DType == h && x.Shape.Eq(v.Shape)
}
