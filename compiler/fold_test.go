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
