package compiler

import (
	"sort"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// recompute is gradient checkpointing: the backward pass reads a
// checkpointed segment's activations from copies recomputed just before
// the first backward kernel that needs them, instead of keeping the
// forward pass's values alive until then. The forward values then die
// inside the forward pass, so memory planning reuses their arena space;
// what stays alive are the segment's inputs (the checkpoints).
//
// Per segment, only the values the backward reads, and what they are
// computed from inside the segment, are cloned. The clones are the same
// ops on the same inputs (a dropout clone keeps its stream, so Philox
// draws the same mask), so the step's results are bit for bit those
// without checkpointing on a deterministic backend. Values that must not
// run twice stay stored: a loss (its kernel accumulates atomically and
// raises the status flag) and anything an update writes back (batch
// norm's running statistics are computed once per step).
func recompute(p *Program) error {
	f := p.Step
	keep := map[*ir.Value]bool{}
	for _, v := range f.Outputs {
		keep[v] = true
	}
	for _, u := range f.Updates {
		keep[u.New] = true
	}
	segOf := func(v *ir.Value) int {
		if v.Checkpoint <= 0 || v.Role != ir.Temp || v.Phase != "" || keep[v] {
			return 0
		}
		if d := ops.Lookup(v.Op); d == nil || d.Kind == ops.Special || d.Kind == ops.Source {
			return 0
		}
		return v.Checkpoint
	}
	// need[s] are the segment's values to recompute; first[s] the index of
	// the first backward value that reads one of them.
	need := map[int]map[*ir.Value]bool{}
	first := map[int]int{}
	var mark func(v *ir.Value, s int)
	mark = func(v *ir.Value, s int) {
		if need[s][v] {
			return
		}
		need[s][v] = true
		for _, a := range v.Args {
			if segOf(a) == s {
				mark(a, s)
			}
		}
	}
	for i, v := range f.Values {
		if v.Phase != "bwd" {
			continue
		}
		for _, a := range v.Args {
			s := segOf(a)
			if s == 0 {
				continue
			}
			if need[s] == nil {
				need[s] = map[*ir.Value]bool{}
				first[s] = i
			}
			mark(a, s)
		}
	}
	if len(need) == 0 {
		return nil
	}
	// Clone each segment's needed values in forward order before its
	// first backward reader, and point every backward reader at them.
	clone := map[*ir.Value]*ir.Value{}
	at := map[int][]*ir.Value{} // insertion index → clones
	segs := make([]int, 0, len(need))
	for s := range need {
		segs = append(segs, s)
	}
	sort.Ints(segs)
	for _, s := range segs {
		for _, v := range f.Values {
			if !need[s][v] {
				continue
			}
			c := f.NewValue(v.Op, v.DType, v.Shape.Clone(), v.Pos)
			f.Values = f.Values[:len(f.Values)-1] // placed below
			c.Attrs, c.Name, c.Phase = v.Attrs, v.Name, "re"
			c.Args = make([]*ir.Value, len(v.Args))
			for k, a := range v.Args {
				if ca, ok := clone[a]; ok && need[s][a] {
					c.Args[k] = ca
				} else {
					c.Args[k] = a
				}
			}
			clone[v] = c
			at[first[s]] = append(at[first[s]], c)
		}
	}
	var out []*ir.Value
	for i, v := range f.Values {
		out = append(out, at[i]...)
		if v.Phase == "bwd" {
			for k, a := range v.Args {
				if c, ok := clone[a]; ok {
					v.Args[k] = c
				}
			}
		}
		out = append(out, v)
	}
	f.Values = out
	f.Renumber()
	return nil
}
