package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

// TestResidualNorm: a post-LN sublayer's norm(x + dropout(h W + b)) becomes
// one fused layernorm (h, b, x, γ, β) with the dropout's probability and
// stream; a sum read again (a pre-LN residual) is left alone; the model
// passed in is not changed.
func TestResidualNorm(t *testing.T) {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(5), ir.D(12))
	ln := func(name string, s *ir.Value) *ir.Value {
		return b.Op("layernorm", ir.Attrs{F: 1e-5}, s, b.Param(name+".weight", ir.F32, 1, 12), b.Param(name+".bias", ir.F32, 1, 12))
	}
	h := b.Op("dropout", ir.Attrs{F: 0.1, I: 3}, b.Linear("fc1", x, 12))
	post := ln("norm1", b.Binary("add", x, h)) // fused
	s2 := b.Binary("add", post, b.Linear("fc2", post, 12))
	pre := b.Binary("add", ln("norm2", s2), s2) // s2 read twice: stays
	m := b.Model("m", b.Op("mean", ir.Attrs{}, pre), pre, ir.Optimizer{Kind: "sgd", LR: 0.1})
	before := m.Forward.Print()
	p := through(t, m, "residual norm", true)
	if m.Forward.Print() != before {
		t.Fatal("residualNorm changed the model it was given")
	}
	var fused, plain int
	for _, v := range p.Model.Forward.Values {
		if v.Op != "layernorm" {
			continue
		}
		switch len(v.Args) {
		case 5:
			fused++
			if v.Attrs.F2 != 0.1 || v.Attrs.I != 3 || v.Args[2].Name != "x" || v.Args[0].Op != "matmul" {
				t.Errorf("fused layernorm %s", v.LongString())
			}
		case 3:
			plain++
		}
	}
	if fused != 1 || plain != 1 || count(p.Model.Forward, "dropout") != 0 {
		t.Errorf("%d fused, %d plain layernorms, %d dropouts:\n%s", fused, plain, count(p.Model.Forward, "dropout"), p.Model.Forward.Print())
	}
	if q := through(t, m, "autodiff", false); count(q.Model.Forward, "layernorm") != 0 {
		t.Errorf("fuse=false kept a layernorm:\n%s", q.Model.Forward.Print())
	}
}
