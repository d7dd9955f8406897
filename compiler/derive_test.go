package compiler

import "testing"

func TestDeriveFuncs(t *testing.T) {
	p := through(t, testMLP(6, 5, 3, 0.2, adam), "derive functions", true)
	if p.Step == nil || p.Step.Outputs["loss"] == nil {
		t.Fatal("no step function with a loss output")
	}
	if p.Predict == nil || p.Predict.Outputs["output"] == nil {
		t.Fatal("no predict function with an output")
	}
	// Predict stops at the logits: no loss, no labels.
	if n := count(p.Predict, "cross_entropy"); n != 0 {
		t.Errorf("predict computes cross_entropy %d times", n)
	}
	for _, v := range p.Predict.Inputs() {
		if v.Name == "y" {
			t.Error("predict takes the labels")
		}
	}
	if count(p.Step, "dropout") != 1 || count(p.Predict, "dropout") != 1 {
		t.Error("both functions keep dropout (the train flag decides at run time)")
	}
}
