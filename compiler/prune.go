package compiler

import "github.com/ngen-ml/ngen/compiler/ir"

// prune drops the values no output, gradient or update needs (the forward
// pass's loss in predict, say, or gradients of values that are not
// parameters) and renumbers what is left.
func prune(p *Program) error {
	for _, f := range p.Funcs() {
		f.Prune()
		f.Renumber()
	}
	return nil
}

// dropValues keeps vs without the dead values, in order, as f's values,
// and renumbers f: how a rewriting pass removes what it replaced.
func dropValues(f *ir.Func, vs []*ir.Value, dead map[*ir.Value]bool) {
	out := make([]*ir.Value, 0, len(vs))
	for _, v := range vs {
		if !dead[v] {
			out = append(out, v)
		}
	}
	f.Values = out
	f.Renumber()
}
