package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Reductions over any set of axes (Attrs.Axes; nil means all), with
// Attrs.KeepDim as in PyTorch. The kernel template lives in
// codegen/reduce.go and takes an elementwise prologue.

func reduceInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	x := v.Args[0]
	if !x.DType.IsFloat() {
		return nil, 0, fmt.Errorf("needs a float tensor, got %s", x.Type())
	}
	axes, err := ir.NormAxes(v.Attrs.Axes, len(x.Shape))
	if err != nil {
		return nil, 0, err
	}
	dt := x.DType
	if v.Attrs.Str != "" {
		// A sum that rounds through its 16-bit input's type and stores
		// the rounded value in f32 (compiler/fold_sum_casts.go).
		if v.Op != "sum" || x.DType.String() != v.Attrs.Str || !x.DType.IsHalf() {
			return nil, 0, fmt.Errorf("rounds through %q, which is not its %s input's 16-bit type", v.Attrs.Str, x.DType)
		}
		dt = ir.F32
	}
	return ReducedShape(x.Shape, axes, v.Attrs.KeepDim), dt, nil
}

// ReducedShape is shape with axes removed, or set to 1 when keep.
func ReducedShape(shape ir.Shape, axes []int, keep bool) ir.Shape {
	red := map[int]bool{}
	for _, a := range axes {
		red[a] = true
	}
	out := ir.Shape{}
	for i, d := range shape {
		switch {
		case !red[i]:
			out = append(out, d)
		case keep:
			out = append(out, ir.D(1))
		}
	}
	return out
}

// keepDims reshapes a reduction result (or its gradient) so that it
// broadcasts against the reduction's input.
func keepDims(b *Builder, v, g *ir.Value) *ir.Value {
	if v.Attrs.KeepDim {
		return g
	}
	x := v.Args[0]
	axes, _ := ir.NormAxes(v.Attrs.Axes, len(x.Shape))
	return b.Op("reshape", ir.Attrs{Shape: ReducedShape(x.Shape, axes, true)}, g)
}

func init() {
	register(
		&Def{Name: "sum", Kind: Reduce, NArgs: 1, Infer: reduceInfer, Flops: 1,
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				x := v.Args[0]
				return []*ir.Value{b.Op("broadcast", ir.Attrs{Shape: x.Shape.Clone()}, keepDims(b, v, g))}
			}},
		// mean divides by the number of reduced elements, which may be
		// symbolic (the batch size).
		&Def{Name: "mean", Kind: Reduce, NArgs: 1, Infer: reduceInfer, Flops: 1,
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				x := v.Args[0]
				gb := b.Op("broadcast", ir.Attrs{Shape: x.Shape.Clone()}, keepDims(b, v, g))
				return []*ir.Value{b.Op("divcount", ir.Attrs{Axes: v.Attrs.Axes, Shape: x.Shape.Clone()}, gb)}
			}},
		// max is torch.amax: the gradient is split evenly between the
		// maximal elements of a reduced slice (a row whose every key is
		// masked ties at the output projection's bias; giving each tie the
		// whole gradient counted it once per tie).
		&Def{Name: "max", Kind: Reduce, NArgs: 1, Infer: reduceInfer, Flops: 1,
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				x := v.Args[0]
				gk := keepDims(b, v, g)
				yk := keepDims(b, v, v)
				one := b.Op("fill", ir.Attrs{F: 1, Shape: x.Shape.Clone(), Str: x.DType.String()})
				ties := b.Op("sum", ir.Attrs{Axes: append([]int(nil), v.Attrs.Axes...), KeepDim: true}, b.Op("max_bwd", ir.Attrs{}, one, yk, x))
				return []*ir.Value{b.Op("max_bwd", ir.Attrs{}, b.Binary("div", gk, ties), yk, x)}
			}},
		// divcount divides by the element count of Attrs.Axes of
		// Attrs.Shape (mean's gradient).
		&Def{Name: "divcount", Kind: Elementwise, NArgs: 1, Infer: sameAsArg, Flops: 1,
			Expr: func(c *Ctx, v *ir.Value, a []string) string {
				return "(" + a[0] + " / (" + c.T + ")(" + CountC(c, v.Attrs.Shape, v.Attrs.Axes) + "))"
			}},
		// max_bwd(g, y, x) = x == y ? g : 0, all broadcast to x.
		&Def{Name: "max_bwd", Kind: Elementwise, NArgs: 3, Infer: broadcastArgs, Flops: 1,
			Expr: func(c *Ctx, v *ir.Value, a []string) string {
				return "(" + a[2] + " == " + a[1] + " ? " + a[0] + " : " + c.Lit(0) + ")"
			}},
	)
}

// CountC is the C expression for the number of elements of shape over axes.
func CountC(c *Ctx, shape ir.Shape, axes []int) string {
	axes, _ = ir.NormAxes(axes, len(shape))
	var sub ir.Shape
	for _, a := range axes {
		sub = append(sub, shape[a])
	}
	z := sub.Size()
	for _, s := range z.Syms {
		c.Scalar(s, "int")
	}
	return z.C()
}
