package compiler

import (
	"fmt"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
)

// root follows aliases to the buffer that owns the storage.
func root(pl *runtime.Plan, i int) int {
	for pl.Buffers[i].Placement == runtime.Alias {
		i = pl.Buffers[i].AliasOf
	}
	return i
}

// TestPlanMemory replays each function's kernels over the arena as the
// runtime lays it out (runtime.PlanArena over the plan's live ranges, at
// several batch sizes) and checks that every arena buffer a kernel reads
// was written earlier and not overwritten since by a buffer sharing its
// bytes. This checks the live ranges themselves, not only that the arena
// respects them.
func TestPlanMemory(t *testing.T) {
	for _, fuse := range []bool{true, false} {
		for name, m := range planModels() {
			p := through(t, m(), "plan memory", fuse)
			for _, batch := range []int{1, 32, 1000} {
				env := map[string]int{"B": batch}
				for fi, f := range p.Funcs() {
					t.Run(fmt.Sprintf("%s/fuse=%v/%s/B=%d", name, fuse, f.Name, batch), func(t *testing.T) {
						checkArena(t, p, fi, f, env)
					})
				}
			}
		}
	}
}

// planModels are small models whose graphs stress different placements:
// reductions to a scalar (the seed of a full reduction), a residual (a value
// read by two later kernels), a regularised loss (two gradient
// contributions to one parameter), a mean over the batch.
func planModels() map[string]func() *ir.Model {
	return map[string]func() *ir.Model{
		"mlp":  seedMLP,
		"mlp2": func() *ir.Model { return testMLP(64, 48, 10, 0.2, adam) },
		"residual": func() *ir.Model {
			b := irtest.New()
			x := b.Input("x", ir.F32, ir.S("B"), ir.D(4))
			y := b.Input("y", ir.I32, ir.S("B"))
			h := b.Unary("tanh", b.Linear("fc1", x, 4))
			h = b.Binary("add", h, b.Unary("sigmoid", b.Linear("fc2", h, 4)))
			logits := b.Linear("fc3", h, 3)
			w := b.F.Lookup(ir.Param, "fc3.weight")
			l2 := b.Scale(b.Op("sum", ir.Attrs{}, b.Binary("mul", w, w)), 1e-4)
			return b.Model("residual", b.Binary("add", b.Binary("cross_entropy", logits, y), l2), logits, ir.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9})
		},
		"regression": func() *ir.Model {
			b := irtest.New()
			x := b.Input("x", ir.F32, ir.S("B"), ir.D(5))
			tgt := b.Input("t", ir.F32, ir.S("B"), ir.D(1))
			pred := b.Linear("fc", b.Unary("relu", b.Linear("hidden", x, 7)), 1)
			loss := b.Op("mean", ir.Attrs{}, b.Unary("square", b.Binary("sub", pred, tgt)))
			return b.Model("regression", loss, pred, ir.Optimizer{Kind: "adamw", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01})
		},
		"max": func() *ir.Model {
			b := irtest.New()
			x := b.Input("x", ir.F32, ir.S("B"), ir.D(6))
			h := b.Linear("fc", x, 4)
			loss := b.Op("sum", ir.Attrs{}, b.Op("max", ir.Attrs{Axes: []int{1}}, h))
			return b.Model("max", loss, h, adam)
		},
	}
}

func checkArena(t *testing.T, p *Program, fi int, f *ir.Func, env map[string]int) {
	pl := p.Plan
	// Lay out the arena as the runtime does.
	var idx []int
	var sizes []int64
	var live [][2]int
	var sum int64
	for i, b := range pl.Buffers {
		if b.Placement != runtime.Arena || b.Func != fi {
			continue
		}
		idx = append(idx, i)
		n := b.Elems.Eval(env) * int64(b.DType.Size())
		sizes = append(sizes, n)
		live = append(live, b.Live)
		sum += align(n) // the arena aligns every buffer
	}
	off, total := runtime.PlanArena(sizes, live)
	span := map[int][2]int64{} // buffer → [lo, hi) in the arena
	for k, i := range idx {
		span[i] = [2]int64{off[k], off[k] + sizes[k]}
	}
	overlap := func(a, b int) bool { return span[a][0] < span[b][1] && span[b][0] < span[a][1] }
	if fi == 0 && total >= sum {
		t.Errorf("%s at B=%d: arena %d bytes, no reuse below the %d-byte sum", f.Name, env["B"], total, sum)
	}

	// Replay: kernels in step order, then the plan's copies.
	type access struct {
		step  int
		buf   int
		write bool
		what  string
	}
	var acc []access
	arena := func(v *ir.Value) (int, bool) {
		i, ok := p.BufOf[v]
		if !ok {
			t.Fatalf("%s: %s has no buffer", f.Name, v)
		}
		r := root(pl, i)
		return r, pl.Buffers[r].Placement == runtime.Arena
	}
	for _, g := range p.Groups[f] {
		for _, v := range g.Inputs {
			if r, ok := arena(v); ok {
				acc = append(acc, access{g.Step, r, false, g.Name + " reads " + v.String()})
			}
		}
		for _, v := range g.Outputs {
			if r, ok := arena(v); ok {
				acc = append(acc, access{g.Step, r, true, g.Name + " writes " + v.String()})
			}
		}
	}
	for si, st := range pl.Funcs[fi].Steps {
		if st.Kind == runtime.CopyStep {
			if r := root(pl, st.Src); pl.Buffers[r].Placement == runtime.Arena {
				acc = append(acc, access{si, r, false, st.Ops})
			}
		}
	}
	writes := map[int][]int{} // buffer → steps that write it
	for _, a := range acc {
		if a.write {
			writes[a.buf] = append(writes[a.buf], a.step)
		}
	}
	for _, a := range acc {
		if a.write {
			continue
		}
		last := -1
		for _, w := range writes[a.buf] {
			if w < a.step && w > last {
				last = w
			}
		}
		if last < 0 {
			t.Errorf("%s at B=%d: %s (buffer %s) before anything writes it", f.Name, env["B"], a.what, pl.Buffers[a.buf].Name)
			continue
		}
		for other, ws := range writes {
			if other == a.buf || !overlap(other, a.buf) {
				continue
			}
			for _, w := range ws {
				if w >= last && w <= a.step {
					t.Errorf("%s at B=%d: %s, but step %d overwrote its bytes with %s in between", f.Name, env["B"], a.what, w, pl.Buffers[other].Name)
				}
			}
		}
	}
	// The same, stated over the plan alone: buffers alive together are
	// disjoint.
	for a := range idx {
		for b := a + 1; b < len(idx); b++ {
			together := live[a][0] <= live[b][1] && live[b][0] <= live[a][1]
			if together && overlap(idx[a], idx[b]) {
				t.Errorf("%s at B=%d: %s and %s are live together and overlap", f.Name, env["B"], pl.Buffers[idx[a]].Name, pl.Buffers[idx[b]].Name)
			}
		}
	}
}

// TestPlanMemoryLayout: parameters and their gradients are views into two
// vectors laid out alike, which is what lets one kernel update them all.
func TestPlanMemoryLayout(t *testing.T) {
	p := through(t, seedMLP(), "plan memory", true)
	pl := p.Plan
	f := p.Step
	var offset int64
	for _, prm := range f.Params() {
		pb := pl.Buffers[p.BufOf[prm]]
		gb := pl.Buffers[p.BufOf[base(f.Grads[prm.Name])]]
		if pb.Placement != runtime.Alias || pl.Buffers[pb.AliasOf].Role != "params" || pb.Offset != offset {
			t.Errorf("param %s: %+v, want a view of params at %d", prm.Name, pb, offset)
		}
		if gb.Placement != runtime.Alias || pl.Buffers[gb.AliasOf].Role != "grads" || gb.Offset != offset {
			t.Errorf("gradient of %s: %+v, want a view of grads at %d", prm.Name, gb, offset)
		}
		offset += prm.Shape.Size().N
	}
	// Adam's moments are updated in place by the update kernel: no copies.
	for _, st := range pl.Funcs[0].Steps {
		if st.Kind == runtime.CopyStep {
			t.Errorf("update copy %q: the update kernel could write in place", st.Ops)
		}
	}
	if p.PeakBytes <= 0 {
		t.Error("no planned peak")
	}
	// The peak is below keeping every value the step computes.
	env := map[string]int{"B": p.RefBatch}
	var all int64
	for _, b := range pl.Buffers {
		if b.Placement != runtime.Alias {
			all += align(b.Elems.Eval(env) * int64(b.DType.Size()))
		}
	}
	if p.PeakBytes >= all {
		t.Errorf("peak %d bytes, not below the %d bytes of all buffers", p.PeakBytes, all)
	}
}
