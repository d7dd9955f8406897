package compiler

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// verify checks the invariants every pass must keep: values are in
// topological order, each type matches its op's shape rule, and outputs,
// gradients and updates refer to values of their function. After fusion
// every computed value belongs to exactly one kernel group.
func verify(p *Program) error {
	fs := p.Funcs()
	if len(fs) == 0 {
		fs = []*ir.Func{p.Model.Forward}
	}
	for _, f := range fs {
		if err := verifyFunc(f); err != nil {
			return fmt.Errorf("func %s: %w", f.Name, err)
		}
		if gs, ok := p.Groups[f]; ok {
			if err := verifyGroups(f, gs); err != nil {
				return fmt.Errorf("func %s: %w", f.Name, err)
			}
		}
	}
	return nil
}

func verifyFunc(f *ir.Func) error {
	seen := map[*ir.Value]bool{}
	for _, v := range f.Values {
		for i, a := range v.Args {
			if !seen[a] {
				return fmt.Errorf("%s arg %d (%s) is not defined before use", v.LongString(), i, a)
			}
		}
		if seen[v] {
			return fmt.Errorf("%s appears twice", v)
		}
		seen[v] = true
		shape, dt, err := ops.Infer(v)
		if err != nil {
			return fmt.Errorf("%s: %v", v.LongString(), err)
		}
		if !shape.Eq(v.Shape) || dt != v.DType {
			return fmt.Errorf("%s: type is %s%s by its shape rule", v.LongString(), dt, shape)
		}
	}
	for n, v := range f.Outputs {
		if !seen[v] {
			return fmt.Errorf("output %s refers to a dangling value", n)
		}
	}
	for n, v := range f.Grads {
		if !seen[v] {
			return fmt.Errorf("gradient of %s refers to a dangling value", n)
		}
	}
	for _, u := range f.Updates {
		if !seen[u.State] || !seen[u.New] {
			return fmt.Errorf("update refers to a dangling value")
		}
		if !u.State.Shape.Eq(u.New.Shape) || u.State.DType != u.New.DType {
			return fmt.Errorf("update of %s with %s: types differ", u.State.Type(), u.New.Type())
		}
	}
	return nil
}

func verifyGroups(f *ir.Func, gs []*Group) error {
	owner := map[*ir.Value]int{}
	pos := map[*ir.Value]int{}
	for i, v := range f.Values {
		pos[v] = i
	}
	for gi, g := range gs {
		for _, v := range g.Values {
			if _, dup := owner[v]; dup {
				return fmt.Errorf("%s is in two kernels", v)
			}
			if _, ok := pos[v]; !ok {
				return fmt.Errorf("kernel %d holds a value not in the function", gi)
			}
			owner[v] = gi
		}
	}
	for _, v := range f.Values {
		d := ops.Lookup(v.Op)
		if d.Kind == ops.Source || d.Kind == ops.View || isConst(v) {
			continue
		}
		gi, ok := owner[v]
		if !ok {
			return fmt.Errorf("%s is in no kernel", v.LongString())
		}
		// A kernel may only read values of earlier kernels, including
		// through a flat view (the update reads each gradient that way).
		for _, a := range v.Args {
			for _, s := range storageOf(a) {
				if ag, ok := owner[s]; ok && ag > gi {
					return fmt.Errorf("%s in kernel %d reads %s from later kernel %d", v, gi, s, ag)
				}
			}
		}
	}
	return nil
}
