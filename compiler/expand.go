package compiler

import (
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// expandFused replaces every fused op that has a primitive form
// (ops.Def.Expand: LayerNorm, the flash-style attention) by that form when
// fusion is off, so -fuse=none computes the model from primitive ops, one
// kernel each, as a reference for the fused kernels. It runs on the
// forward function before autodiff, so the gradients are those of the
// primitives too. The model is copied first: a compile must not change
// the model it was given.
func expandFused(p *Program) error {
	if p.Fuse || !anyExpand(p.Model.Forward) {
		return nil
	}
	f := p.Model.Forward
	g, m := f.Clone(f.Name)
	mc := *p.Model
	mc.Forward, mc.Loss, mc.Output = g, m[p.Model.Loss], m[p.Model.Output]
	p.Model = &mc
	old := g.Values
	g.Values = nil
	b := &ops.Builder{F: g}
	for _, v := range old {
		d := ops.Lookup(v.Op)
		if d == nil || d.Expand == nil {
			g.Values = append(g.Values, v)
			continue
		}
		b.Pos = v.Pos
		r := d.Expand(b, v)
		if b.Err != nil {
			return b.Err
		}
		// v keeps its identity for its users and becomes a view of the
		// expansion's result (same shape), which costs no kernel.
		v.Op, v.Args, v.Attrs = "reshape", []*ir.Value{r}, ir.Attrs{Shape: v.Shape.Clone()}
		g.Values = append(g.Values, v)
	}
	g.Renumber()
	return nil
}

func anyExpand(f *ir.Func) bool {
	for _, v := range f.Values {
		if d := ops.Lookup(v.Op); d != nil && d.Expand != nil {
			return true
		}
	}
	return false
}
