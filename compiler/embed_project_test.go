package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

// embedModel is ids [B, t] → embedding [V, 8] → a projection to 12 with
// two bias adds (a recurrent layer's input projection) → a mean loss;
// with reuse, the embedding is also read by a second projection.
func embedModel(vocab, t int, reuse bool) *ir.Model {
	b := irtest.New()
	ids := b.Input("ids", ir.I32, ir.S("B"), ir.D(t))
	w := b.Param("emb.weight", ir.F32, 1, vocab, 8)
	e := b.Op("embedding", ir.Attrs{}, w, ids)
	b.Pos = ir.Pos{File: "irtest.go", Line: 2}
	m := b.Param("w_ih", ir.F32, 0.3, 12, 8)
	h := b.Op("matmul", ir.Attrs{TransB: true}, e, m)
	h = b.Binary("add", h, b.Param("b_ih", ir.F32, 0.3, 12))
	h = b.Binary("add", h, b.Param("b_hh", ir.F32, 0.3, 12))
	if reuse {
		h = b.Binary("add", h, b.Op("matmul", ir.Attrs{TransB: true}, e, b.Param("w2", ir.F32, 0.3, 12, 8)))
	}
	loss := b.Op("mean", ir.Attrs{}, b.Unary("tanh", h))
	return b.Model("emb", loss, h, irtest.Adam)
}

// TestProjectEmbedding: the projection and its biases move onto the
// table ([V, 12]) and the gather reads the projected table, named at the
// user's embedding; the model passed in is unchanged; one token per
// sample (generation) and an embedding read twice are left alone.
func TestProjectEmbedding(t *testing.T) {
	m := embedModel(10, 16, false)
	before := m.Forward.Print()
	p := through(t, m, "project embedding", true)
	if m.Forward.Print() != before {
		t.Fatal("projectEmbedding changed the model it was given")
	}
	f := p.Model.Forward
	if n := count(f, "embedding"); n != 1 {
		t.Fatalf("%d embeddings, want 1:\n%s", n, f.Print())
	}
	var gather *ir.Value
	for _, v := range f.Values {
		if v.Op == "embedding" {
			gather = v
		}
	}
	table := gather.Args[0]
	if !gather.Shape.Eq(ir.Shape{ir.S("B"), ir.D(16), ir.D(12)}) || !table.Shape.Eq(ir.Static(10, 12)) {
		t.Fatalf("gather %s of table %s", gather.LongString(), table.LongString())
	}
	if gather.Pos.Line != 1 {
		t.Errorf("the gather is at line %d, want the embedding's (1): its token-id errors name the user's Embedding", gather.Pos.Line)
	}
	// table = ((W · Mᵀ) + b_ih) + b_hh
	if table.Op != "add" || table.Args[0].Op != "add" || table.Args[0].Args[0].Op != "matmul" {
		t.Fatalf("table is not the projected, biased table:\n%s", f.Print())
	}
	if mm := table.Args[0].Args[0]; mm.Args[0].Name != "emb.weight" || mm.Args[1].Name != "w_ih" || !mm.Attrs.TransB {
		t.Fatalf("projection %s", mm.LongString())
	}
	if p.Model.Output != gather {
		t.Fatalf("the output is %s, want the gather (the chain's last value keeps its identity)", p.Model.Output.LongString())
	}
	// The whole pipeline still compiles: autodiff, fusion, memory.
	through(t, embedModel(10, 16, false), "plan memory", true)

	for _, c := range []struct {
		name     string
		vocab, t int
		reuse    bool
	}{
		{"one token per sample: 4·V > RefBatch·T", 10, 1, false},
		{"embedding read twice", 10, 16, true},
	} {
		p := through(t, embedModel(c.vocab, c.t, c.reuse), "derive functions", true)
		for _, v := range p.Model.Forward.Values {
			if v.Op == "embedding" && v.Args[0].Op != "param" {
				t.Errorf("%s: rewritten:\n%s", c.name, p.Model.Forward.Print())
			}
		}
	}
}
