package compiler

import "github.com/ngen-ml/ngen/compiler/ir"

// residualNorm folds the residual connection of a post-LN Transformer
// sublayer into its LayerNorm: layernorm(r + dropout(h + b)) becomes the
// layernorm op's fused form layernorm(h, b, r, γ, β) (dropout in
// Attrs.F2/I), one kernel that computes the sum in its loads, so the sum
// is never stored; backward recomputes it from h, b, r and the Philox
// mask. Only where the sum, the dropout and the bias add have no other
// use (pre-LN blocks read the sum again as the next residual) and are not
// results. Forward function only, before autodiff; the model is copied
// first (a compile must not change the model it was given).
func residualNorm(p *Program) error {
	if p.Model.Precision != nil {
		// Under mixed precision h is a half GEMM result: the fused form
		// would read it widened to f32 and keep it and r, both f32, for
		// backward, where the plain sum keeps one f32 tensor (the
		// TransformerLM's planned peak at batch 16: 7% lower), and
		// h + b is rounded to the half type as autocast's addmm rounds it.
		return nil
	}
	if !anyResidualNorm(p.Model) {
		return nil
	}
	f := p.Model.Forward
	g, m := f.Clone(f.Name)
	mc := *p.Model
	mc.Forward, mc.Loss, mc.Output = g, m[p.Model.Loss], m[p.Model.Output]
	p.Model = &mc
	uses, kept := g.Uses(), results(&mc)
	dead := map[*ir.Value]bool{}
	for _, v := range g.Values {
		mt, ok := matchResidualNorm(v, uses, kept)
		if !ok {
			continue
		}
		dead[v.Args[0]], dead[mt.z] = true, true
		if mt.drop != nil {
			dead[mt.drop] = true
			v.Attrs.F2, v.Attrs.I = mt.drop.Attrs.F, mt.drop.Attrs.I
		}
		v.Args = []*ir.Value{mt.h, mt.b, mt.r, v.Args[1], v.Args[2]}
	}
	dropValues(g, g.Values, dead)
	return nil
}

func anyResidualNorm(m *ir.Model) bool {
	uses, kept := m.Forward.Uses(), results(m)
	for _, v := range m.Forward.Values {
		if _, ok := matchResidualNorm(v, uses, kept); ok {
			return true
		}
	}
	return false
}

type residualMatch struct {
	h, b, r, z, drop *ir.Value
}

// matchResidualNorm matches v = layernorm(s, γ, β), s = r + d (either
// order), d = dropout(z) or z, z = h + b with b a [D] vector and h, r of
// s's shape and dtype.
func matchResidualNorm(v *ir.Value, uses map[*ir.Value][]*ir.Value, kept map[*ir.Value]bool) (residualMatch, bool) {
	if v.Op != "layernorm" || len(v.Args) != 3 {
		return residualMatch{}, false
	}
	s := v.Args[0]
	single := func(x *ir.Value) bool { return len(uses[x]) == 1 && !kept[x] }
	if s.Op != "add" || len(s.Args) != 2 || !single(s) {
		return residualMatch{}, false
	}
	same := func(x *ir.Value) bool { return x.Shape.Eq(s.Shape) && x.DType == s.DType }
	d := s.Shape[len(s.Shape)-1]
	for i := 0; i < 2; i++ {
		r, z := s.Args[i], s.Args[1-i]
		var drop *ir.Value
		if z.Op == "dropout" && single(z) {
			drop, z = z, z.Args[0]
		}
		if !same(r) || z.Op != "add" || len(z.Args) != 2 || !single(z) || z == r {
			continue
		}
		for j := 0; j < 2; j++ {
			h, b := z.Args[j], z.Args[1-j]
			if same(h) && b.Shape.Eq(ir.Shape{d}) && b.DType == s.DType {
				return residualMatch{h: h, b: b, r: r, z: z, drop: drop}, true
			}
		}
	}
	return residualMatch{}, false
}
