package compiler

import (
	"slices"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// Sibling reductions (part of the fuse pass). Reductions over the same
// iteration space and axes whose inputs are ready before the pass share one
// kernel: each input element is read once and feeds every accumulator
// (codegen/reduce.go). Batch norm is the case in point: its forward sums
// d and d² of the shifted input, its backward sums dy and dy·d, and each
// pair would otherwise read the [N,C,H,W] tensor twice.

// usersOf maps each value to the values that read it.
func usersOf(f *ir.Func) map[*ir.Value][]*ir.Value {
	users := map[*ir.Value][]*ir.Value{}
	for _, v := range f.Values {
		for _, a := range v.Args {
			users[a] = append(users[a], v)
		}
	}
	return users
}

// sameReduction reports whether reduction v iterates over g's space and
// reduces g's axes.
func sameReduction(g *Group, v *ir.Value) bool {
	if g.Kind != Reduce || !g.Space.Eq(v.Args[0].Shape) {
		return false
	}
	ga, _ := ir.NormAxes(g.Root.Attrs.Axes, len(g.Space))
	va, _ := ir.NormAxes(v.Attrs.Axes, len(g.Space))
	return slices.Equal(ga, va)
}

// siblingReduce picks the reduction group that reduction v joins, or -1:
// one over the same space and axes in which v's input is ready, preferring
// the group that computes the input (then it is never stored), else the
// latest.
func siblingReduce(gs []*Group, owner map[*ir.Value]int, v *ir.Value, ready func(*ir.Value, int, ...*ir.Value) bool) int {
	ok := func(gi int) bool { return sameReduction(gs[gi], v) && ready(v, gi) && !readsReduction(gs[gi], v) }
	if gi, has := owner[v.Args[0]]; has && ok(gi) {
		return gi
	}
	for gi := len(gs) - 1; gi >= 0; gi-- {
		if ok(gi) {
			return gi
		}
	}
	return -1
}

// prologueGroup picks the reduction group that elementwise v joins as part
// of its prologue, or -1: v must lie in the group's space, read none of
// its reductions but some operand the group computes or reads already,
// and feed (through elementwise ops) a reduction over the same axes, which
// will then join as a sibling. Computing v where its reduction runs saves
// storing it, as the reduction absorbing its producer does for the first
// reduction of a group. (An op reading nothing the group touches, such as
// the autodiff seed broadcast, is better left to fuse with its consumer.)
func prologueGroup(gs []*Group, users map[*ir.Value][]*ir.Value, v *ir.Value, ready func(*ir.Value, int, ...*ir.Value) bool) int {
	for gi := len(gs) - 1; gi >= 0; gi-- {
		g := gs[gi]
		if g.Kind == Reduce && !hasGather(g) && g.Space.Eq(v.Shape) && ready(v, gi) && !readsReduction(g, v) &&
			sharesOperand(g, v) && feedsReduction(g, v, users, map[*ir.Value]bool{}) {
			return gi
		}
	}
	return -1
}

// sharesOperand reports whether g computes or reads one of v's
// (non-constant) arguments, so that v adds no new stream over memory.
func sharesOperand(g *Group, v *ir.Value) bool {
	for _, a := range v.Args {
		if isConst(a) || a.Role == ir.Scalar {
			continue
		}
		if g.has(a) {
			return true
		}
		for _, m := range g.Values {
			if slices.Contains(m.Args, a) {
				return true
			}
		}
	}
	return false
}

// readsReduction reports whether v reads one of g's reductions, whose
// results exist only after the pass that v would be part of.
func readsReduction(g *Group, v *ir.Value) bool {
	for _, a := range v.Args {
		if g.has(a) && kindOf(a) == ops.Reduce {
			return true
		}
	}
	return false
}

// feedsReduction reports whether v reaches, through elementwise ops over
// the same space, a reduction that could join g.
func feedsReduction(g *Group, v *ir.Value, users map[*ir.Value][]*ir.Value, seen map[*ir.Value]bool) bool {
	if seen[v] {
		return false
	}
	seen[v] = true
	for _, u := range users[v] {
		switch kindOf(u) {
		case ops.Reduce:
			if sameReduction(g, u) {
				return true
			}
		case ops.Elementwise:
			if g.Space.Eq(u.Shape) && feedsReduction(g, u, users, seen) {
				return true
			}
		}
	}
	return false
}
