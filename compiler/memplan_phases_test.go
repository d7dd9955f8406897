package compiler

import (
	"fmt"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

// TestPlanPhases checks the split of the training step that RunGrads and
// RunUpdate rely on: the optimizer's kernels and copies come after
// UpdateFrom, everything else before it, and no temporary lives across it.
func TestPlanPhases(t *testing.T) {
	for _, fuse := range []bool{true, false} {
		for name, m := range planModels() {
			t.Run(fmt.Sprintf("%s/fuse=%v", name, fuse), func(t *testing.T) {
				p := through(t, m(), "plan memory", fuse)
				rf := p.Plan.Funcs[0]
				if rf.Name != "step" || rf.UpdateFrom <= 0 || rf.UpdateFrom >= len(rf.Steps) {
					t.Fatalf("%s: UpdateFrom %d of %d steps", rf.Name, rf.UpdateFrom, len(rf.Steps))
				}
				for _, g := range p.Groups[p.Step] {
					if opt := groupIsOpt(g); opt != (g.Step >= rf.UpdateFrom) {
						t.Errorf("kernel %s (opt %v) at step %d, update from %d", g, opt, g.Step, rf.UpdateFrom)
					}
				}
				for i, st := range rf.Steps {
					if st.Kind != runtime.CopyStep {
						continue
					}
					b := p.Plan.Buffers[st.Buf]
					opt := b.Role == "params" || isOptState(b.Name) // else running statistics
					if opt != (i >= rf.UpdateFrom) {
						t.Errorf("step %d %s: update from %d", i, st.Ops, rf.UpdateFrom)
					}
				}
				if err := checkPhases(p.Plan, 0, rf.UpdateFrom, len(rf.Steps)); err != nil {
					t.Error(err)
				}
				// The update phase opens with the update check, which
				// must see the gradient after accumulation and the
				// all-reduce, and come before any write (issue 27).
				if st := rf.Steps[rf.UpdateFrom]; st.Builtin != runtime.UpdateCheckKernel || st.Buf < 0 || p.Plan.Buffers[st.Buf].Role != "status" {
					t.Errorf("step %d (update from) is %q %s, want the update check on the status block", rf.UpdateFrom, st.Builtin, st.Ops)
				}
				for i, st := range rf.Steps {
					if st.Builtin == runtime.UpdateCheckKernel && i != rf.UpdateFrom {
						t.Errorf("a second update check at step %d", i)
					}
				}
				for _, f := range p.Plan.Funcs[1:] {
					if f.UpdateFrom != 0 {
						t.Errorf("%s: UpdateFrom %d, want 0", f.Name, f.UpdateFrom)
					}
				}
			})
		}
	}
}

func isOptState(name string) bool {
	for _, pre := range []string{"adam.", "adamw.", "sgd."} {
		if len(name) > len(pre) && name[:len(pre)] == pre {
			return true
		}
	}
	return false
}
