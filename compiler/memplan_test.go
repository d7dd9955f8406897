package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

// TestPlanMemory checks the liveness plan: arena buffers whose live ranges
// overlap never share bytes, and reuse keeps the peak below the sum.
func TestPlanMemory(t *testing.T) {
	p := through(t, testMLP(64, 48, 10, 0.2, adam), "plan memory", true)
	pl := p.Plan
	env := map[string]int{"B": 32}
	for fi := range pl.Funcs {
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
			sum += n
		}
		if len(idx) == 0 {
			continue
		}
		off, total := runtime.PlanArena(sizes, live)
		for a := range idx {
			for b := a + 1; b < len(idx); b++ {
				lifeOverlap := live[a][0] <= live[b][1] && live[b][0] <= live[a][1]
				byteOverlap := off[a] < off[b]+sizes[b] && off[b] < off[a]+sizes[a]
				if lifeOverlap && byteOverlap {
					t.Errorf("func %d: %s and %s are live together and overlap", fi, pl.Buffers[idx[a]].Name, pl.Buffers[idx[b]].Name)
				}
			}
		}
		if fi == 0 && total >= sum {
			t.Errorf("step arena %d bytes, no reuse below the %d-byte sum", total, sum)
		}
	}
	if p.PeakBytes <= 0 {
		t.Error("no planned peak")
	}
}
