package compiler

import "github.com/ngen-ml/ngen/compiler/ir"

// foldConstants rewrites views of constants into constants of the view's
// shape. A fill is never stored: kernels inline its value. A view (reshape,
// flat) reinterprets its argument's storage, so a view of a fill would read
// memory that no kernel writes. The gradient of a full reduction is exactly
// that: the autodiff seed, a scalar fill, reshaped to keep the reduced axes.
func foldConstants(p *Program) error {
	for _, f := range p.Funcs() {
		for _, v := range f.Values {
			if c, ok := constView(v); ok {
				v.Op = "fill"
				v.Args = nil
				v.Attrs = ir.Attrs{F: c, Shape: v.Shape.Clone(), Str: v.DType.String()}
			}
		}
	}
	return nil
}

// constView reports whether v is a view whose storage is entirely one
// constant, and which constant. Values are in order, so a view's arguments
// are already folded when v is visited.
func constView(v *ir.Value) (float64, bool) {
	switch v.Op {
	case "reshape":
		if isConst(v.Args[0]) {
			return v.Args[0].Attrs.F, true
		}
	case "flat":
		if len(v.Args) == 0 {
			return 0, false
		}
		for _, a := range v.Args {
			if !isConst(a) || a.Attrs.F != v.Args[0].Attrs.F {
				return 0, false
			}
		}
		return v.Args[0].Attrs.F, true
	}
	return 0, false
}
