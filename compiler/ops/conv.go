package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Convolution and pooling over NCHW tensors, as index-mapping (Gather) ops:
//
//   - im2col unfolds the windows of x into columns, so a convolution is a
//     batched GEMM of the weight with them (the DSL's Conv2d); col2im, its
//     gradient, folds columns back, each input pixel gathering the columns
//     that read it (no atomics, deterministic);
//   - max pooling keeps, per output, the window offset of its maximum as
//     i32 (maxpool_argmax); maxpool_pick reads the maximum through it, and
//     the gradient maxpool_bwd routes each output's gradient back through
//     it, so no mask the size of the input is ever stored;
//   - avgpool and its gradient.
//
// Attrs.Ints is the window [KH, KW, SH, SW, PH, PW, DH, DW, G] (G, the
// convolution groups, only for im2col/col2im); Attrs.Shape is the input
// shape for the ops that produce it (col2im, the pooling gradients). C, H
// and W must be static; N may be the symbolic batch.

// Window is a convolution or pooling window.
type Window struct {
	KH, KW, SH, SW, PH, PW, DH, DW, G int
}

// Ints encodes w for Attrs.Ints.
func (w Window) Ints() []int { return []int{w.KH, w.KW, w.SH, w.SW, w.PH, w.PW, w.DH, w.DW, w.G} }

func windowOf(v *ir.Value) (Window, error) {
	a := v.Attrs.Ints
	if len(a) != 9 {
		return Window{}, fmt.Errorf("window attribute has %d values, want 9", len(a))
	}
	w := Window{a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]}
	if w.KH < 1 || w.KW < 1 || w.SH < 1 || w.SW < 1 || w.DH < 1 || w.DW < 1 || w.PH < 0 || w.PW < 0 || w.G < 1 {
		return Window{}, fmt.Errorf("bad window: kernel %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d, groups %d",
			w.KH, w.KW, w.SH, w.SW, w.PH, w.PW, w.DH, w.DW, w.G)
	}
	return w, nil
}

// Out is the output size along one axis, as torch computes it (floor);
// below 1 when the window does not fit. Go's division truncates toward
// zero, which would turn a window a little larger than the padded input
// into one output.
func (w Window) Out(h, k, s, p, d int) int {
	span := h + 2*p - d*(k-1) - 1
	if span < 0 {
		return 0
	}
	return span/s + 1
}

// imageDims checks x is [N, C, H, W] with static C, H, W.
func imageDims(op string, s ir.Shape) (c, h, w int, err error) {
	if len(s) != 4 {
		return 0, 0, 0, fmt.Errorf("%s needs an N×C×H×W input, got %s", op, s)
	}
	for _, d := range s[1:] {
		if d.Sym != "" {
			return 0, 0, 0, fmt.Errorf("%s needs static C, H and W, got %s", op, s)
		}
	}
	return s[1].N, s[2].N, s[3].N, nil
}

// geometry returns the window and the input and output sizes of a
// windowed op whose input has shape in.
func geometry(op string, v *ir.Value, in ir.Shape) (w Window, c, h, wd, oh, ow int, err error) {
	if w, err = windowOf(v); err != nil {
		return
	}
	if c, h, wd, err = imageDims(op, in); err != nil {
		return
	}
	oh, ow = w.Out(h, w.KH, w.SH, w.PH, w.DH), w.Out(wd, w.KW, w.SW, w.PW, w.DW)
	if oh < 1 || ow < 1 {
		err = fmt.Errorf("%s: window %dx%d (dilation %dx%d) does not fit the %dx%d input padded by %dx%d",
			op, w.KH, w.KW, w.DH, w.DW, h, wd, w.PH, w.PW)
	}
	if c%w.G != 0 {
		err = fmt.Errorf("%s: %d channels do not split into %d groups", op, c, w.G)
	}
	return
}

// colShape is im2col's output: [N, K, L], or [N, G, K, L] with groups,
// where K = C/G·KH·KW and L = OH·OW.
func colShape(n ir.Dim, w Window, c, oh, ow int) ir.Shape {
	k := ir.D(c / w.G * w.KH * w.KW)
	if w.G == 1 {
		return ir.Shape{n, k, ir.D(oh * ow)}
	}
	return ir.Shape{n, ir.D(w.G), k, ir.D(oh * ow)}
}

func im2colInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	x := v.Args[0]
	w, c, _, _, oh, ow, err := geometry(v.Op, v, x.Shape)
	if err != nil {
		return nil, 0, err
	}
	return colShape(x.Shape[0], w, c, oh, ow), x.DType, nil
}

func col2imInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	w, c, _, _, oh, ow, err := geometry("col2im", v, v.Attrs.Shape)
	if err != nil {
		return nil, 0, err
	}
	if want := colShape(v.Attrs.Shape[0], w, c, oh, ow); !v.Args[0].Shape.Eq(want) {
		return nil, 0, fmt.Errorf("columns %s do not match image %s (want %s)", v.Args[0].Shape, v.Attrs.Shape, want)
	}
	return v.Attrs.Shape.Clone(), v.Args[0].DType, nil
}

func poolInfer(op string, dt func(x *ir.Value) ir.DType) func(v *ir.Value) (ir.Shape, ir.DType, error) {
	return func(v *ir.Value) (ir.Shape, ir.DType, error) {
		x := v.Args[0]
		if !x.DType.IsFloat() {
			return nil, 0, fmt.Errorf("%s needs a float input, got %s", op, x.Type())
		}
		w, c, h, wd, oh, ow, err := geometry(op, v, x.Shape)
		if err != nil {
			return nil, 0, err
		}
		if w.G != 1 {
			return nil, 0, fmt.Errorf("%s has no groups", op)
		}
		// torch's avg_pool2d has no dilation (nor does the template).
		if op == "avgpool" && (w.DH != 1 || w.DW != 1) {
			return nil, 0, fmt.Errorf("avgpool has no dilation, got %dx%d", w.DH, w.DW)
		}
		if 2*w.PH > w.KH || 2*w.PW > w.KW {
			return nil, 0, fmt.Errorf("%s: padding %dx%d must be at most half the kernel %dx%d", op, w.PH, w.PW, w.KH, w.KW)
		}
		// A dilated window can fall wholly in the padding; its maximum
		// would have no offset to store.
		if op != "avgpool" && (!windowsTouch(h, w.KH, w.SH, w.PH, w.DH, oh) || !windowsTouch(wd, w.KW, w.SW, w.PW, w.DW, ow)) {
			return nil, 0, fmt.Errorf("%s: a window %dx%d (dilation %dx%d) lies wholly in the padding of the %dx%d input", op, w.KH, w.KW, w.DH, w.DW, h, wd)
		}
		return ir.Shape{x.Shape[0], ir.D(c), ir.D(oh), ir.D(ow)}, dt(x), nil
	}
}

// windowsTouch reports whether each of the out windows along an axis of
// size h reads at least one input element.
func windowsTouch(h, k, s, p, d, out int) bool {
	for o := 0; o < out; o++ {
		touch := false
		for i := 0; i < k && !touch; i++ {
			y := o*s - p + i*d
			touch = y >= 0 && y < h
		}
		if !touch {
			return false
		}
	}
	return true
}

// poolGradInfer types a gradient that maps [N,C,OH,OW] values back to the
// input shape Attrs.Shape.
func poolGradInfer(op string) func(v *ir.Value) (ir.Shape, ir.DType, error) {
	return func(v *ir.Value) (ir.Shape, ir.DType, error) {
		_, c, _, _, oh, ow, err := geometry(op, v, v.Attrs.Shape)
		if err != nil {
			return nil, 0, err
		}
		want := ir.Shape{v.Attrs.Shape[0], ir.D(c), ir.D(oh), ir.D(ow)}
		for _, a := range v.Args {
			if !a.Shape.Eq(want) {
				return nil, 0, fmt.Errorf("%s: operand %s, want %s", op, a.Shape, want)
			}
		}
		return v.Attrs.Shape.Clone(), v.Args[0].DType, nil
	}
}

func sameDType(x *ir.Value) ir.DType { return x.DType }
func i32(*ir.Value) ir.DType         { return ir.I32 }

func init() {
	withShape := func(v *ir.Value) ir.Attrs {
		return ir.Attrs{Ints: append([]int(nil), v.Attrs.Ints...), Shape: v.Args[0].Shape.Clone()}
	}
	register(
		&Def{Name: "im2col", Kind: Gather, NArgs: 1, Infer: im2colInfer, Gather: im2colGather, Indexed: []bool{true}, Moves: true, RowLen: im2colRow,
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("col2im", withShape(v), g)}
			}},
		// The gradient ops have no gradient of their own: ngen
		// differentiates once.
		&Def{Name: "col2im", Kind: Gather, NArgs: 1, Infer: col2imInfer, Gather: col2imGather, Indexed: []bool{true}},
		&Def{Name: "maxpool_argmax", Kind: Gather, NArgs: 1, Infer: poolInfer("maxpool", i32), Gather: maxpoolArgmaxGather, Indexed: []bool{true}},
		// maxpool_pick(x, argmax) reads each window's maximum through its
		// stored offset.
		&Def{Name: "maxpool_pick", Kind: Gather, NArgs: 2, Infer: poolInfer("maxpool", sameDType), Gather: maxpoolPickGather, Indexed: []bool{true, false},
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("maxpool_bwd", withShape(v), g, v.Args[1]), nil}
			}},
		&Def{Name: "maxpool_bwd", Kind: Gather, NArgs: 2, Infer: poolGradInfer("maxpool_bwd"), Gather: maxpoolBwdGather, Indexed: []bool{true, true},
			MovesIf: func(v *ir.Value) bool {
				w, _, _, _, _, _, _ := geometry("maxpool_bwd", v, v.Attrs.Shape)
				return w.tiled()
			}},
		&Def{Name: "avgpool", Kind: Gather, NArgs: 1, Infer: poolInfer("avgpool", sameDType), Gather: avgpoolGather, Indexed: []bool{true},
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("avgpool_bwd", withShape(v), g)}
			}},
		&Def{Name: "avgpool_bwd", Kind: Gather, NArgs: 1, Infer: poolGradInfer("avgpool_bwd"), Gather: avgpoolBwdGather, Indexed: []bool{true}},
	)
}

// Conv2d lowers torch.nn.functional.conv2d(x, w, bias) to im2col, a
// batched GEMM with the weight [Co, C/G, KH, KW] and the bias add (bias may
// be nil). The DSL's Conv2d and the op tests share it.
func Conv2d(b *Builder, x, w, bias *ir.Value, win Window) *ir.Value {
	// Operands are checked here rather than left to im2col, the reshape
	// and the GEMM, whose errors would name ops the user never wrote.
	attrs := ir.Attrs{Ints: win.Ints()}
	if _, _, err := im2colInfer(&ir.Value{Op: "conv2d", Args: []*ir.Value{x}, Attrs: attrs}); err != nil {
		return layerError(b, "conv2d", x, err)
	}
	if err := convOperands(x, w, bias, win); err != nil {
		return layerError(b, "conv2d", x, err)
	}
	col := b.Op("im2col", attrs, x)
	if b.Err != nil {
		return col
	}
	n, c := x.Shape[0], x.Shape[1].N
	co := w.Shape[0].N
	k := c / win.G * win.KH * win.KW
	oh, ow := win.Out(x.Shape[2].N, win.KH, win.SH, win.PH, win.DH), win.Out(x.Shape[3].N, win.KW, win.SW, win.PW, win.DW)
	var y *ir.Value
	if win.G == 1 {
		wm := b.Op("reshape", ir.Attrs{Shape: ir.Static(co, k)}, w)
		y = b.Op("matmul", ir.Attrs{}, wm, col) // [N, Co, OH·OW]
	} else {
		// The GEMM batches over (N, groups); the weight is broadcast over N.
		wm := b.Op("reshape", ir.Attrs{Shape: ir.Static(win.G, co/win.G, k)}, w)
		wb := b.Op("broadcast", ir.Attrs{Shape: ir.Shape{n, ir.D(win.G), ir.D(co / win.G), ir.D(k)}}, wm)
		y = b.Op("matmul", ir.Attrs{}, wb, col) // [N, G, Co/G, OH·OW]
	}
	y = b.Op("reshape", ir.Attrs{Shape: ir.Shape{n, ir.D(co), ir.D(oh), ir.D(ow)}}, y)
	if bias != nil {
		y = b.Op("add", ir.Attrs{}, y, b.Op("reshape", ir.Attrs{Shape: ir.Static(co, 1, 1)}, bias))
	}
	return y
}

// convOperands checks the weight is [Co, C/G, KH, KW] for x's C channels
// and the window, and the bias [Co], all of x's dtype.
func convOperands(x, w, bias *ir.Value, win Window) error {
	c := x.Shape[1].N // static: im2col accepted x
	if w.DType != x.DType || (bias != nil && bias.DType != x.DType) {
		return fmt.Errorf("input %s, weight %s and bias must share a dtype", x.Type(), w.Type())
	}
	if len(w.Shape) != 4 || w.Shape[0].Sym != "" || w.Shape[0].N%win.G != 0 {
		return fmt.Errorf("weight %s must be [Cout, Cin/groups, KH, KW] with Cout divisible by groups %d", w.Shape, win.G)
	}
	co := w.Shape[0].N
	if want := ir.Static(co, c/win.G, win.KH, win.KW); !w.Shape.Eq(want) {
		return fmt.Errorf("weight %s does not fit input %s with groups %d and kernel %dx%d: want %s",
			w.Shape, x.Shape, win.G, win.KH, win.KW, want)
	}
	if bias != nil && !bias.Shape.Eq(ir.Static(co)) {
		return fmt.Errorf("bias %s, want [%d]", bias.Shape, co)
	}
	return nil
}

// MaxPool2d lowers torch.nn.functional.max_pool2d: the window offsets of
// the maxima, then the maxima read through them.
func MaxPool2d(b *Builder, x *ir.Value, win Window) *ir.Value {
	attrs := ir.Attrs{Ints: win.Ints()}
	if _, _, err := poolInfer("maxpool2d", i32)(&ir.Value{Op: "maxpool2d", Args: []*ir.Value{x}, Attrs: attrs}); err != nil {
		return layerError(b, "maxpool2d", x, err)
	}
	return b.Op("maxpool_pick", attrs, x, b.Op("maxpool_argmax", attrs, x))
}

// layerError keeps the first error of b, naming the layer the user wrote,
// and returns x in place of the layer's result.
func layerError(b *Builder, op string, x *ir.Value, err error) *ir.Value {
	if b.Err == nil {
		b.Err = fmt.Errorf("%s (%s): %v", op, b.Pos, err)
	}
	return x
}
