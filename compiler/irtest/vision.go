package irtest

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// Conv2d is torch.nn.Conv2d(C, out, (win.KH, win.KW)) with PyTorch's
// initialisation bounds, lowered as the DSL lowers it.
func (b *Builder) Conv2d(name string, x *ir.Value, out int, win ops.Window, bias bool) *ir.Value {
	cin := x.Shape[1].N / win.G
	bound := 1 / math.Sqrt(float64(cin*win.KH*win.KW))
	w := b.Param(name+".weight", x.DType, bound, out, cin, win.KH, win.KW)
	var bv *ir.Value
	if bias {
		bv = b.Param(name+".bias", x.DType, bound, out)
	}
	return ops.Conv2d(b.Builder, x, w, bv, win)
}

// Window is a kh×kw window with the same stride, padding and dilation
// along both axes, and groups g.
func Window(kh, kw, stride, pad, dil, g int) ops.Window {
	return ops.Window{KH: kh, KW: kw, SH: stride, SW: stride, PH: pad, PW: pad, DH: dil, DW: dil, G: g}
}

// ConvNet is a small convolutional network over [B,4,9,8] images whose
// layers reach what the vision kernels special-case, forward and backward
// (im2col and col2im): a padded convolution; a grouped, dilated
// convolution with padding 2; a strided convolution with a non-square
// kernel; a 1×1 convolution without bias; overlapping padded max pooling;
// padded average pooling. A ReLU precedes the max pooling, two
// convolutions and the average pooling, so maxpool_bwd, col2im and
// avgpool_bwd each have a ReLU backward to fuse with.
func ConvNet(dt ir.DType, classes int, opt ir.Optimizer) *ir.Model {
	b := New()
	x := b.Input("x", dt, ir.S("B"), ir.D(4), ir.D(9), ir.D(8))
	y := b.Input("y", ir.I32, ir.S("B"))
	h := b.Unary("relu", b.Conv2d("conv1", x, 6, Window(3, 3, 1, 1, 1, 1), true)) // [B,6,9,8]
	h = ops.MaxPool2d(b.Builder, h, Window(3, 3, 2, 1, 1, 1))                     // [B,6,5,4]
	h = b.Unary("relu", b.Conv2d("conv2", h, 8, Window(3, 3, 1, 2, 2, 2), true))  // [B,8,5,4]
	h = b.Unary("relu", b.Conv2d("conv3", h, 10, Window(3, 2, 2, 1, 1, 1), true)) // [B,10,3,3]
	h = b.Unary("relu", b.Conv2d("conv4", h, 5, Window(1, 1, 1, 0, 1, 1), false)) // [B,5,3,3]
	h = b.Op("avgpool", ir.Attrs{Ints: Window(2, 2, 1, 1, 1, 1).Ints()}, h)       // [B,5,4,4]
	h = b.Op("reshape", ir.Attrs{Shape: ir.Shape{ir.S("B"), ir.D(80)}}, h)
	logits := b.Linear("fc", h, classes)
	return b.Model("convnet", b.Binary("cross_entropy", logits, y), logits, opt)
}

// SeedConvNet is models/convnet's ConvNet (ConvNetBN with bn) at the
// sizes given, for oracle tests at odd small sizes: conv c1 (3×3, pad 1),
// [BatchNorm2d], ReLU, maxpool 2, conv c2 (3×3, pad 1), [BatchNorm2d],
// ReLU, maxpool 2, flatten, fc1 hidden, ReLU, fc2 classes, cross-entropy,
// over [B, cin, h, w] f32 images. Parameter and state names are the
// DSL's (conv1.weight, bn1.running_mean, ...), which are PyTorch's.
func SeedConvNet(cin, h, w, c1, c2, hidden, classes int, bn bool, opt ir.Optimizer) *ir.Model {
	b := New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(cin), ir.D(h), ir.D(w))
	y := b.Input("y", ir.I32, ir.S("B"))
	hv := x
	for i, c := range []int{c1, c2} {
		name := fmt.Sprintf("%d", i+1)
		hv = b.Conv2d("conv"+name, hv, c, Window(3, 3, 1, 1, 1, 1), true)
		if bn {
			hv = b.BatchNorm2d("bn"+name, hv)
		}
		hv = ops.MaxPool2d(b.Builder, b.Unary("relu", hv), Window(2, 2, 2, 0, 1, 1))
	}
	s := hv.Shape
	hv = b.Op("reshape", ir.Attrs{Shape: ir.Shape{ir.S("B"), ir.D(s[1].N * s[2].N * s[3].N)}}, hv)
	hv = b.Unary("relu", b.Linear("fc1", hv, hidden))
	logits := b.Linear("fc2", hv, classes)
	return b.Model("seed_convnet", b.Binary("cross_entropy", logits, y), logits, opt)
}

// BatchNorm2d is torch.nn.BatchNorm2d(C) in training mode with its
// running statistics (momentum 0.1, eps 1e-5), declared as the DSL
// declares it.
func (b *Builder) BatchNorm2d(name string, x *ir.Value) *ir.Value {
	c := x.Shape[1].N
	dt := x.DType
	gamma := b.Source("param", ir.Param, name+".weight", dt, ir.Static(c), "const:1")
	beta := b.Source("param", ir.Param, name+".bias", dt, ir.Static(c), "const:0")
	rm := b.Source("state", ir.State, name+".running_mean", dt, ir.Static(c), "const:0")
	rv := b.Source("state", ir.State, name+".running_var", dt, ir.Static(c), "const:1")
	y, nm, nv := ops.BatchNorm2d(b.Builder, x, gamma, beta, rm, rv, 0.1, 1e-5)
	b.F.Updates = append(b.F.Updates, ir.Update{State: rm, New: nm}, ir.Update{State: rv, New: nv})
	return y
}
