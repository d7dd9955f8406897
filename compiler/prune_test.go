package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

func TestPrune(t *testing.T) {
	p := through(t, testMLP(6, 5, 3, 0.2, adam), "prune", true)
	for _, f := range p.Funcs() {
		used := map[*ir.Value]bool{}
		for _, v := range f.Values {
			for _, a := range v.Args {
				used[a] = true
			}
		}
		roots := map[*ir.Value]bool{}
		for _, v := range f.Outputs {
			roots[v] = true
		}
		for _, v := range f.Grads {
			roots[v] = true
		}
		for _, u := range f.Updates {
			roots[u.State], roots[u.New] = true, true
		}
		for i, v := range f.Values {
			if v.ID != i {
				t.Errorf("%s: %s not renumbered (index %d)", f.Name, v, i)
			}
			if !used[v] && !roots[v] && v.Role != ir.Param && v.Role != ir.State {
				t.Errorf("%s: dead value %s survived", f.Name, v.LongString())
			}
		}
	}
}

// TestPruneDeadBranch: a forward value nothing needs survives derive (the
// step is a plain copy) and must be gone after prune, while a parameter the
// loss ignores stays: its (zero) gradient and its update still need it.
func TestPruneDeadBranch(t *testing.T) {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(3))
	w := b.Param("w", ir.F32, 1, 3)
	b.Param("unused", ir.F32, 1, 2)
	b.Unary("exp", x) // computed, never used
	out := b.Binary("mul", x, w)
	m := b.Model("m", b.Op("sum", ir.Attrs{}, out), out, ir.Optimizer{Kind: "sgd", LR: 0.1})
	before := through(t, m, "fold constants", true)
	if count(before.Step, "exp") != 1 {
		t.Fatalf("the dead exp is gone before prune:\n%s", before.Step.Print())
	}
	p := through(t, m, "prune", true)
	if n := count(p.Step, "exp"); n != 0 {
		t.Errorf("%d dead exp ops survived prune", n)
	}
	if p.Step.Lookup(ir.Param, "unused") == nil {
		t.Error("prune dropped a parameter")
	}
	if names(p.Predict.Inputs()) != "x" {
		t.Errorf("predict inputs %q", names(p.Predict.Inputs()))
	}
}
