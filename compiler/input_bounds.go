package compiler

import (
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// inputBound is the exclusive upper bound on the values of integer input
// name that the model's ops accept: the rows of an embedding table it
// (or scatters the gradient of), the classes of a cross-entropy it labels,
// whichever is smaller;
// 2 for an integer input used otherwise (a mask: 0 or 1 are valid
// anywhere). 0 for a float input. The plan records it
// (runtime.Buffer.Bound), so that tools and tests can feed any model valid
// data without knowing it. A cross-entropy's ignore index
// (ops.CEIgnore) is a valid label too, which the kernels skip rather
// than report, but it lies outside [0, C): data drawn below the bound
// never holds it.
func inputBound(p *Program, name string) int64 {
	var bound int64
	found := false
	note := func(b int64) {
		if !found || b < bound {
			bound, found = b, true
		}
	}
	for _, f := range p.Funcs() {
		in := f.Lookup(ir.Input, name)
		if in == nil {
			continue
		}
		if in.DType != ir.I32 {
			return 0
		}
		uses := f.Uses()
		// Follow views (a reshaped input is the same values).
		vals := []*ir.Value{in}
		for len(vals) > 0 {
			v := vals[0]
			vals = vals[1:]
			for _, u := range uses[v] {
				switch {
				case u.Op == "embedding" && u.Args[1] == v:
					note(int64(u.Args[0].Shape[0].N))
				case u.Op == "embedding_bwd" && u.Args[1] == v:
					note(int64(u.Shape[0].N)) // the table's gradient
				case (u.Op == "cross_entropy" || u.Op == "ce_grad") && u.Args[1] == v:
					logits := u.Args[0]
					note(int64(logits.Shape[len(logits.Shape)-1].N))
				case ops.Lookup(u.Op).Kind == ops.View:
					vals = append(vals, u)
				default:
					note(2)
				}
			}
		}
	}
	return bound
}
