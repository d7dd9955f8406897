package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

func TestDeriveFuncs(t *testing.T) {
	m := testMLP(6, 5, 3, 0.2, adam)
	forward := m.Forward.Print()
	p := through(t, m, "derive functions", true)
	if p.Step == nil || p.Predict == nil {
		t.Fatalf("step %v, predict %v", p.Step, p.Predict)
	}
	if fs := p.Funcs(); len(fs) != 3 || fs[0] != p.Step || fs[1] != p.Predict || fs[2] != p.PredictEval {
		t.Errorf("Funcs() = %v, want step, predict, predict_eval (the plan's order)", fs)
	}
	// The step returns the loss and nothing else yet: gradients and
	// updates are later passes' work.
	loss := p.Step.Outputs["loss"]
	if len(p.Step.Outputs) != 1 || loss == nil || loss.Op != "cross_entropy" || len(loss.Shape) != 0 {
		t.Errorf("step outputs %v, want only the scalar cross_entropy loss", p.Step.Outputs)
	}
	if len(p.Step.Grads) != 0 || len(p.Step.Updates) != 0 {
		t.Errorf("step has %d gradients and %d updates before autodiff", len(p.Step.Grads), len(p.Step.Updates))
	}
	if names(p.Step.Inputs()) != "x y" || len(p.Step.Params()) != 4 {
		t.Errorf("step inputs %q, %d params", names(p.Step.Inputs()), len(p.Step.Params()))
	}
	// Predict stops at the logits: no loss, no labels.
	out := p.Predict.Outputs["output"]
	if len(p.Predict.Outputs) != 1 || out == nil || !out.Shape.Eq(ir.Shape{ir.S("B"), ir.D(3)}) {
		t.Errorf("predict outputs %v, want the [B,3] logits", p.Predict.Outputs)
	}
	if n := count(p.Predict, "cross_entropy"); n != 0 {
		t.Errorf("predict computes cross_entropy %d times", n)
	}
	if names(p.Predict.Inputs()) != "x" {
		t.Errorf("predict takes %q, want only x", names(p.Predict.Inputs()))
	}
	if count(p.Step, "dropout") != 1 || count(p.Predict, "dropout") != 1 {
		t.Error("step and predict keep dropout (the train flag decides at run time)")
	}
	// predict_eval is predict in eval mode: no dropout, same output.
	if pe := p.PredictEval; pe == nil || count(pe, "dropout") != 0 || len(pe.Values) != len(p.Predict.Values)-1 ||
		!pe.Outputs["output"].Shape.Eq(out.Shape) || names(pe.Inputs()) != "x" {
		t.Errorf("predict_eval: %v", pe)
	}
	// The functions are copies: later passes rewrite them, and the
	// declared model must stay as the user wrote it.
	fwd := map[*ir.Value]bool{}
	for _, v := range m.Forward.Values {
		fwd[v] = true
	}
	for _, f := range p.Funcs() {
		for _, v := range f.Values {
			if fwd[v] {
				t.Fatalf("%s shares %s with the forward function", f.Name, v)
			}
		}
	}
	through(t, m, "plan memory", true)
	if m.Forward.Print() != forward {
		t.Error("compiling changed the declared forward function")
	}
}

// A model without an output (a loss only) has nothing to predict.
func TestDeriveNoOutput(t *testing.T) {
	m := testMLP(6, 5, 3, 0, adam)
	m.Output = nil
	if p := through(t, m, "derive functions", true); p.Predict != nil || len(p.Funcs()) != 1 {
		t.Errorf("predict derived without an output: %v", p.Predict)
	}
}

// A forward that never reads the train flag needs no eval form.
func TestDeriveNoEvalForm(t *testing.T) {
	if p := through(t, testMLP(6, 5, 3, 0, adam), "derive functions", true); p.PredictEval != nil {
		t.Errorf("predict_eval derived for a model without dropout or batch norm:\n%s", p.PredictEval.Print())
	}
}

func names(vs []*ir.Value) string {
	s := ""
	for i, v := range vs {
		if i > 0 {
			s += " "
		}
		s += v.Name
	}
	return s
}

// TestDerivePredictCommitsNothing (issue 27): inference never changes the
// model, so predict drops the forward's state updates (batch norm's
// running statistics); the step keeps them.
func TestDerivePredictCommitsNothing(t *testing.T) {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(2), ir.D(3), ir.D(3))
	y := b.Input("y", ir.I32, ir.S("B"))
	gamma := b.Source("param", ir.Param, "bn.weight", ir.F32, ir.Static(2), "const:1")
	beta := b.Source("param", ir.Param, "bn.bias", ir.F32, ir.Static(2), "const:0")
	rm := b.Source("state", ir.State, "bn.running_mean", ir.F32, ir.Static(2), "const:0")
	rv := b.Source("state", ir.State, "bn.running_var", ir.F32, ir.Static(2), "const:1")
	h, nm, nv := ops.BatchNorm2d(b.Builder, x, gamma, beta, rm, rv, 0.1, 1e-5)
	b.F.Updates = append(b.F.Updates, ir.Update{State: rm, New: nm}, ir.Update{State: rv, New: nv})
	logits := b.Linear("fc", b.Op("reshape", ir.Attrs{Shape: ir.Shape{ir.S("B"), ir.D(18)}}, h), 3)
	m := b.Model("bn", b.Binary("cross_entropy", logits, y), logits, adam)
	p := through(t, m, "plan memory", true)
	if len(p.Step.Updates) == 0 {
		t.Fatal("the step lost its state updates")
	}
	for _, f := range []*ir.Func{p.Predict, p.PredictEval} {
		if f != nil && len(f.Updates) != 0 {
			t.Errorf("%s updates %d state buffers", f.Name, len(f.Updates))
		}
	}
	for _, f := range p.Plan.Funcs[1:] {
		for i, st := range f.Steps {
			if st.Kind == runtime.CopyStep && p.Plan.Buffers[st.Buf].Role == "state" {
				t.Errorf("%s step %d copies into %s", f.Name, i, p.Plan.Buffers[st.Buf].Name)
			}
		}
	}
}
