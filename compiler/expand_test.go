package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

// TestExpandFused: without fusion a LayerNorm becomes primitive ops (no
// layernorm kernel is left, and the gradients come from the primitives);
// with fusion it stays one op; the model passed in is not changed.
func TestExpandFused(t *testing.T) {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(3), ir.D(6))
	y := b.Input("y", ir.I32, ir.S("B"), ir.D(3))
	h := b.Op("layernorm", ir.Attrs{F: 1e-5}, x, b.Param("ln.weight", ir.F32, 1, 6), b.Param("ln.bias", ir.F32, 1, 6))
	logits := b.Linear("fc", h, 4)
	m := b.Model("m", b.Binary("cross_entropy", logits, y), logits, ir.Optimizer{Kind: "sgd", LR: 0.1})
	before := m.Forward.Print()

	unfused := through(t, m, "autodiff", false)
	if m.Forward.Print() != before {
		t.Fatal("expandFused changed the model it was given")
	}
	for _, f := range unfused.Funcs() {
		if n := count(f, "layernorm") + count(f, "layernorm_bwd"); n != 0 {
			t.Errorf("fuse=false: %s keeps %d LayerNorm ops:\n%s", f.Name, n, f.Print())
		}
	}
	if count(unfused.Step, "mean") == 0 {
		t.Errorf("fuse=false: no mean in the expansion:\n%s", unfused.Step.Print())
	}
	fused := through(t, m, "autodiff", true)
	if count(fused.Step, "layernorm") != 1 || count(fused.Step, "layernorm_bwd") != 1 {
		t.Errorf("fuse=true: want one layernorm and one layernorm_bwd:\n%s", fused.Step.Print())
	}
}
