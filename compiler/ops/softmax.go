package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Softmax along any one axis (Attrs.Axes = [axis]), numerically stable:
// the row's maximum is subtracted before exponentiating. A Loop kernel
// with a block per row; the row's elements are inner apart, so any axis
// works (the last one reads contiguously).
//
// Masks, for the last axis only: Attrs.Str "causal" masks element j of row
// i (the second-to-last coordinate) where j > i, and an optional second
// operand, an i32 key-padding mask [N, L] over the leading dimension N
// and the softmax axis L, masks where it is non-zero (PyTorch's
// key_padding_mask, True = ignore). Masked elements are 0, and a fully
// masked row is all zeros (PyTorch gives NaN there), with zero gradient.
//
// softmax_bwd(g, y) = y·(g - Σ g·y) along the same axis.

func softmaxAxis(v *ir.Value, s ir.Shape) (int, error) {
	if len(v.Attrs.Axes) != 1 {
		return 0, fmt.Errorf("softmax needs one axis, got %v", v.Attrs.Axes)
	}
	ax, err := ir.NormAxes(v.Attrs.Axes, len(s))
	if err != nil {
		return 0, err
	}
	if s[ax[0]].Sym != "" {
		return 0, fmt.Errorf("the softmax axis %d of %s must be static", ax[0], s)
	}
	return ax[0], nil
}

func softmaxInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	x := v.Args[0]
	if !x.DType.IsFloat() {
		return nil, 0, fmt.Errorf("needs a float tensor, got %s", x.Type())
	}
	axis, err := softmaxAxis(v, x.Shape)
	if err != nil {
		return nil, 0, err
	}
	n := len(x.Shape)
	masked := v.Attrs.Str != "" || len(v.Args) > 1
	if masked && (axis != n-1 || n < 2) {
		return nil, 0, fmt.Errorf("masks apply along the last axis of a tensor of rank 2 or more, got axis %d of %s", axis, x.Shape)
	}
	if s := v.Attrs.Str; s != "" && s != "causal" {
		return nil, 0, fmt.Errorf("unknown mask %q (causal)", s)
	}
	if len(v.Args) > 2 {
		return nil, 0, fmt.Errorf("softmax takes 1 or 2 arguments, got %d", len(v.Args))
	}
	if len(v.Args) == 2 {
		m := v.Args[1]
		if want := (ir.Shape{x.Shape[0], x.Shape[n-1]}); m.DType != ir.I32 || !m.Shape.Eq(want) {
			return nil, 0, fmt.Errorf("key padding mask %s, want i32%s", m.Type(), want)
		}
	}
	return x.Shape.Clone(), x.DType, nil
}

func softmaxBwdInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	g, y := v.Args[0], v.Args[1]
	if !g.Shape.Eq(y.Shape) || g.DType != y.DType || !g.DType.IsFloat() {
		return nil, 0, fmt.Errorf("gradient %s and output %s differ", g.Type(), y.Type())
	}
	if _, err := softmaxAxis(v, y.Shape); err != nil {
		return nil, 0, err
	}
	return y.Shape.Clone(), y.DType, nil
}

// softmaxRows returns the rows (the shape without the axis), the axis
// length and the distance between a row's elements.
func softmaxRows(v *ir.Value, s ir.Shape) (rows ir.Shape, n int, inner ir.Shape) {
	axis, _ := softmaxAxis(v, s)
	rows = append(s[:axis].Clone(), s[axis+1:]...)
	return rows, s[axis].N, s[axis+1:].Clone()
}

// rowIndex renders the declarations of the row r's first element (base)
// and the stride between its elements.
func (g *cg) rowIndex(c *Ctx, n int, inner ir.Shape) {
	in := c.Size(inner)
	g.f("  const long long inner = %s;", in)
	g.f("  const long long base = (r / inner) * %d * inner + r %% inner;", n)
}

func softmaxLoop(c *Ctx, v *ir.Value, at func(int, string) string, out string) string {
	x := v.Args[0]
	rows, n, inner := softmaxRows(v, x.Shape)
	g := &cg{}
	t := c.T
	g.blockRed(t, "red", 1)
	g.f("const long long nrows = %s;", c.Size(rows))
	g.f("for (long long r = blockIdx.x; r < nrows; r += gridDim.x) {")
	g.rowIndex(c, n, inner)
	// masked(j): whether element j of row r is masked.
	var conds []string
	if v.Attrs.Str == "causal" {
		g.f("  const long long qi = r %% %s;", c.Dim(x.Shape[len(x.Shape)-2]))
		conds = append(conds, "j > qi")
	}
	if len(v.Args) > 1 {
		g.f("  const long long kb = r / (%s);", c.Size(x.Shape[1:len(x.Shape)-1]))
		conds = append(conds, at(1, fmt.Sprintf("kb * %d + j", n))+" != 0")
	}
	masked := "false"
	if len(conds) > 0 {
		masked = "(" + conds[0]
		for _, s := range conds[1:] {
			masked += " || " + s
		}
		masked += ")"
	}
	elem := at(0, "base + j * inner")
	g.f("  %s m = -NGEN_INF;", t)
	g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) {", n)
	g.f("    const %s xj = %s ? -NGEN_INF : %s;", t, masked, elem)
	g.f("    m = xj > m ? xj : m;")
	g.f("  }")
	g.blockCombine("red", "max", "m")
	g.f("  %s s = %s;", t, c.Lit(0))
	g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) {", n)
	g.f("    s += %s ? %s : %s(%s - m);", masked, c.Lit(0), c.Math("exp"), elem)
	g.f("  }")
	g.blockCombine("red", "sum", "s")
	// A fully masked row has m = -inf and s = 0: all zeros, by definition.
	g.f("  const %s inv = s > %s ? %s / s : %s;", t, c.Lit(0), c.Lit(1), c.Lit(0))
	g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) {", n)
	g.f("    %s[base + j * inner] = %s ? %s : %s(%s - m) * inv;", out, masked, c.Lit(0), c.Math("exp"), elem)
	g.f("  }")
	g.f("}")
	return g.b.String()
}

func softmaxBwdLoop(c *Ctx, v *ir.Value, at func(int, string) string, out string) string {
	y := v.Args[1]
	rows, n, inner := softmaxRows(v, y.Shape)
	g := &cg{}
	t := c.T
	g.blockRed(t, "red", 1)
	g.f("const long long nrows = %s;", c.Size(rows))
	g.f("for (long long r = blockIdx.x; r < nrows; r += gridDim.x) {")
	g.rowIndex(c, n, inner)
	g.f("  %s s = %s;", t, c.Lit(0))
	g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) s += %s * %s;", n, at(0, "base + j * inner"), at(1, "base + j * inner"))
	g.blockCombine("red", "sum", "s")
	g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) {", n)
	g.f("    %s[base + j * inner] = %s * (%s - s);", out, at(1, "base + j * inner"), at(0, "base + j * inner"))
	g.f("  }")
	g.f("}")
	return g.b.String()
}

func init() {
	rowsBlocks := func(v *ir.Value) ir.Shape {
		rows, _, _ := softmaxRows(v, v.Shape)
		return rows
	}
	register(
		&Def{Name: "softmax", Kind: Loop, NArgs: -1, Infer: softmaxInfer, Loop: softmaxLoop, Flops: 4, Blocks: rowsBlocks,
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				gx := b.Op("softmax_bwd", ir.Attrs{Axes: append([]int(nil), v.Attrs.Axes...)}, g, v)
				out := []*ir.Value{gx}
				if len(v.Args) > 1 {
					out = append(out, nil)
				}
				return out
			}},
		&Def{Name: "softmax_bwd", Kind: Loop, NArgs: 2, Infer: softmaxBwdInfer, Loop: softmaxBwdLoop, Flops: 3, Blocks: rowsBlocks},
	)
}
