package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

func TestPrune(t *testing.T) {
	p := through(t, testMLP(6, 5, 3, 0.2, adam), "prune", true)
	for _, f := range p.Funcs() {
		used := map[*ir.Value]bool{}
		for _, v := range f.Values {
			for _, a := range v.Args {
				used[a] = true
			}
		}
		roots := map[*ir.Value]bool{}
		for _, v := range f.Outputs {
			roots[v] = true
		}
		for _, v := range f.Grads {
			roots[v] = true
		}
		for _, u := range f.Updates {
			roots[u.State], roots[u.New] = true, true
		}
		for i, v := range f.Values {
			if v.ID != i {
				t.Errorf("%s: %s not renumbered (index %d)", f.Name, v, i)
			}
			if !used[v] && !roots[v] && v.Role != ir.Param && v.Role != ir.State {
				t.Errorf("%s: dead value %s survived", f.Name, v.LongString())
			}
		}
	}
}
