package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

func TestAutodiff(t *testing.T) {
	p := through(t, testMLP(6, 5, 3, 0.2, adam), "autodiff", true)
	params := p.Step.Params()
	if len(params) != 4 || len(p.Step.Grads) != 4 {
		t.Fatalf("%d params, %d gradients", len(params), len(p.Step.Grads))
	}
	for _, prm := range params {
		g := p.Step.Grads[prm.Name]
		if g == nil || !g.Shape.Eq(prm.Shape) || g.DType != prm.DType {
			t.Errorf("gradient of %s: %v", prm.Name, g)
		}
	}
	// Dropout's gradient redraws the same mask: the test MLP's one hidden
	// layer has a dropout forward and another backward.
	if n := count(p.Step, "dropout"); n != 2 {
		t.Errorf("%d dropout ops after autodiff, want 1 forward + 1 backward", n)
	}
}

func TestAutodiffSharedAndUnused(t *testing.T) {
	b := irtest.New()
	x := b.Param("x", ir.F32, 1, 3)
	unused := b.Param("unused", ir.F32, 1, 2)
	_ = unused
	// loss = sum(x·x): x is used twice, so its gradient sums two terms.
	loss := b.Op("sum", ir.Attrs{}, b.Binary("mul", x, x))
	p := through(t, b.Model("m", loss, x, ir.Optimizer{Kind: "sgd", LR: 0.1}), "autodiff", true)
	if g := p.Step.Grads["x"]; g == nil || g.Op != "add" {
		t.Errorf("gradient of a value used twice is %v, want the sum of both uses", g)
	}
	g := p.Step.Grads["unused"]
	if g == nil || !g.Shape.Eq(ir.Static(2)) {
		t.Fatalf("unused parameter's gradient: %v", g)
	}
	if base(g).Op != "fill" && !(g.Op == "copy" && g.Args[0].Op == "fill") {
		t.Errorf("unused parameter's gradient is %s, want zeros", g.LongString())
	}
}
