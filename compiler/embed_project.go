package compiler

import "github.com/ngen-ml/ngen/compiler/ir"

// projectEmbedding projects the embedding table instead of the embedded
// tokens where a linear map reads an embedding:
//
//	embedding(W, ids) · Mᵀ + b₁ + … = embedding(W · Mᵀ + b₁ + …, ids)
//
// (W [V, E] the table, M [N, E] the map, the b [N] optional biases), exact
// in real arithmetic since every row of the left side is one row of W
// times Mᵀ. A recurrent layer's input projection is such a map: for the
// LSTM language model (V 99, E 128, N = 4·256) over B·T = 2048 tokens the
// projection of the tokens costs 2·B·T·E·N FLOPs forward and twice that
// backward (dX and dM), the table's 2·V·E·N each, 20 times less. Backward,
// autodiff then gives the table's gradient as a scatter-add of the [N]
// wide gradient rows (embedding_bwd) followed by two small GEMMs, and
// the biases' gradients as sums over V rows instead of B·T.
//
// It pays when the table has fewer rows than the batch has tokens; the
// batch is symbolic, so the pass decides at the reference batch
// (Options.RefBatch), with a margin of 4 for the gather and the scatter
// the rewrite adds: 4·V ≤ RefBatch·T. A model that embeds one token per
// call (the LSTM generator, T 1) keeps its per-token projection.
//
// Only where the embedding and each add have no other use and are not
// results, and the biases are vectors over N. Forward function only,
// before autodiff; the model is copied first (a compile must not change
// the model it was given). Only with fusion on: the unfused plan
// computes the projection per token, as a framework does, so comparing
// the two also checks this rewrite.
func projectEmbedding(p *Program) error {
	if !anyProjectEmbedding(p.Model, p.RefBatch) {
		return nil
	}
	f := p.Model.Forward
	g, m := f.Clone(f.Name)
	mc := *p.Model
	mc.Forward, mc.Loss, mc.Output = g, m[p.Model.Loss], m[p.Model.Output]
	p.Model = &mc
	uses, kept := g.Uses(), results(&mc)
	// A match is found at its matmul and rewritten at its chain's last
	// value, after every bias it reads is defined.
	dead := map[*ir.Value]bool{}
	at := map[*ir.Value]projection{}
	for _, v := range g.Values {
		if mt, ok := matchProjectEmbedding(v, uses, kept, p.RefBatch); ok {
			at[mt.chain[len(mt.chain)-1]] = mt
		}
	}
	var out []*ir.Value
	for _, v := range g.Values {
		mt, ok := at[v]
		if !ok {
			out = append(out, v)
			continue
		}
		// The table's projection and biases, at [V, N]; the chain's last
		// value keeps its identity for its users and becomes the gather.
		mm, emb := mt.chain[0], mt.chain[0].Args[0]
		w, ids := emb.Args[0], emb.Args[1]
		vn := ir.Shape{w.Shape[0], mm.Shape[len(mm.Shape)-1]}
		mk := func(op string, pos ir.Pos, args ...*ir.Value) *ir.Value {
			return &ir.Value{Op: op, Args: args, Shape: vn.Clone(), DType: mm.DType, Attrs: ir.Attrs{}, Pos: pos,
				Phase: mm.Phase, Checkpoint: mm.Checkpoint}
		}
		table := mk("matmul", mm.Pos, w, mm.Args[1])
		table.Attrs.TransB = mm.Attrs.TransB
		out = append(out, table)
		for _, a := range mt.chain[1:] {
			table = mk("add", a.Pos, table, a.Args[mt.bias[a]])
			out = append(out, table)
		}
		for _, c := range mt.chain[:len(mt.chain)-1] {
			dead[c] = true
		}
		dead[emb] = true
		// The gather checks the token ids: its errors name the user's
		// Embedding, as before.
		v.Op, v.Args, v.Attrs, v.Pos = "embedding", []*ir.Value{table, ids}, ir.Attrs{}, emb.Pos
		out = append(out, v)
	}
	dropValues(g, out, dead)
	return nil
}

func anyProjectEmbedding(m *ir.Model, refBatch int) bool {
	uses, kept := m.Forward.Uses(), results(m)
	for _, v := range m.Forward.Values {
		if _, ok := matchProjectEmbedding(v, uses, kept, refBatch); ok {
			return true
		}
	}
	return false
}

// projection is a matched chain: chain[0] the matmul of the embedding,
// then the adds of biases, each reading the one before; bias[a] is the
// index of add a's bias argument.
type projection struct {
	chain []*ir.Value
	bias  map[*ir.Value]int
}

// matchProjectEmbedding matches v = matmul(embedding(W, ids), M) (M [N, E]
// with transb, or [E, N]) and the longest run of bias adds after it whose
// members have no other use, and reports the run when v starts one that
// pays at the reference batch.
func matchProjectEmbedding(v *ir.Value, uses map[*ir.Value][]*ir.Value, kept map[*ir.Value]bool, refBatch int) (projection, bool) {
	if v.Op != "matmul" || len(v.Args) != 2 || v.Attrs.TransA {
		return projection{}, false
	}
	emb, mat := v.Args[0], v.Args[1]
	if emb.Op != "embedding" || len(uses[emb]) != 1 || kept[emb] || len(mat.Shape) != 2 || !mat.DType.IsFloat() {
		return projection{}, false
	}
	w, ids := emb.Args[0], emb.Args[1]
	if len(w.Shape) != 2 || w.Shape[0].Sym != "" || len(ids.Shape) < 1 {
		return projection{}, false
	}
	// Tokens per sample: every static dimension of ids.
	perSample := 1
	for _, d := range ids.Shape {
		if d.Sym == "" {
			perSample *= d.N
		}
	}
	if 4*w.Shape[0].N > refBatch*perSample {
		return projection{}, false
	}
	n := v.Shape[len(v.Shape)-1]
	mt := projection{chain: []*ir.Value{v}, bias: map[*ir.Value]int{}}
	for cur := v; ; {
		u := uses[cur]
		if len(u) != 1 || kept[cur] {
			break
		}
		a := u[0]
		if a.Op != "add" || len(a.Args) != 2 || !a.Shape.Eq(v.Shape) || a.DType != v.DType {
			break
		}
		i := 1
		if a.Args[1] == cur {
			i = 0
		}
		if b := a.Args[i]; b == cur || len(b.Shape) != 1 || b.Shape[0] != n || b.DType != v.DType {
			break
		}
		mt.bias[a] = i
		mt.chain = append(mt.chain, a)
		cur = a
	}
	return mt, true
}
