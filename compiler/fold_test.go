package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

// TestFoldConstants: the gradient of a full reduction reshapes the
// autodiff seed, a fill that kernels inline and never store; before this
// pass existed that reshape read storage nothing wrote.
func TestFoldConstants(t *testing.T) {
	b := irtest.New()
	x := b.Param("x", ir.F32, 1, 2, 3)
	m := b.Model("m", b.Op("sum", ir.Attrs{}, x), x, ir.Optimizer{Kind: "sgd", LR: 0.1})
	p := through(t, m, "lower optimizer", true)
	viewsOfFills := func() int {
		n := 0
		for _, v := range p.Step.Values {
			if (v.Op == "reshape" || v.Op == "flat") && len(v.Args) > 0 && v.Args[0].Op == "fill" {
				n++
			}
		}
		return n
	}
	if viewsOfFills() == 0 {
		t.Fatal("test model has no view of a constant to fold")
	}
	if err := foldConstants(p); err != nil {
		t.Fatal(err)
	}
	if n := viewsOfFills(); n != 0 {
		t.Fatalf("%d views of constants left", n)
	}
	if g := p.Step.Grads["x"]; base(g).Op != "fill" && g.Op != "broadcast" {
		t.Errorf("gradient of sum is %s, want the broadcast seed", g.LongString())
	}
}

// TestFoldViews checks each view rule on its own: a reshape of a fill, and
// a flat whose parts are all one constant, become fills; a flat that mixes
// constants, or views computed storage, stays a view.
func TestFoldViews(t *testing.T) {
	f := ir.NewFunc("step")
	pos := ir.Pos{}
	fill := func(c float64, n ...int) *ir.Value {
		v := f.NewValue("fill", ir.F32, ir.Static(n...), pos)
		v.Attrs = ir.Attrs{F: c, Shape: ir.Static(n...), Str: "f32"}
		return v
	}
	view := func(op string, shape ir.Shape, args ...*ir.Value) *ir.Value {
		v := f.NewValue(op, ir.F32, shape, pos, args...)
		if op == "reshape" {
			v.Attrs.Shape = shape.Clone()
		}
		return v
	}
	seed := fill(1)
	r := view("reshape", ir.Static(1, 1), seed)
	rr := view("reshape", ir.Static(1), r) // a view of a folded view
	zeros := view("flat", ir.Static(5), fill(0, 2), fill(0, 3))
	mixed := view("flat", ir.Static(5), fill(0, 2), fill(1, 3))
	x := f.NewValue("param", ir.F32, ir.Static(2), pos)
	x.Role, x.Name = ir.Param, "x"
	part := view("flat", ir.Static(5), x, fill(0, 3))
	for _, v := range []*ir.Value{r, rr, zeros, mixed, part} {
		f.Outputs[v.String()] = v
	}
	p := &Program{Step: f}
	if err := foldConstants(p); err != nil {
		t.Fatal(err)
	}
	if err := verify(p); err != nil {
		t.Fatalf("folding broke the IR: %v", err)
	}
	for _, tc := range []struct {
		v    *ir.Value
		fold bool
		c    float64
	}{{r, true, 1}, {rr, true, 1}, {zeros, true, 0}, {mixed, false, 0}, {part, false, 0}} {
		switch {
		case tc.fold && (tc.v.Op != "fill" || tc.v.Attrs.F != tc.c || !tc.v.Attrs.Shape.Eq(tc.v.Shape) || len(tc.v.Args) != 0):
			t.Errorf("%s: want fill %g of its own shape", tc.v.LongString(), tc.c)
		case !tc.fold && tc.v.Op == "fill":
			t.Errorf("%s: folded a view of storage that is not one constant", tc.v.LongString())
		}
	}
}
