package dsl

import (
	"math"
	"strings"
	"testing"
)

func TestClipGradValue(t *testing.T) {
	for _, o := range []Optimizer{Adam{LR: 1e-3, Clip: ClipGradValue(0.5)}, AdamW{LR: 1e-3, Clip: ClipGradValue(0.5)}, SGD{LR: 0.1, Clip: ClipGradValue(0.5)}} {
		m := NewModel("c")
		m.Optimizer(o)
		if m.Err() != nil || m.m.Optimizer.ClipValue != 0.5 {
			t.Errorf("%#v: %v, clip value %v", o, m.Err(), m.m.Optimizer)
		}
	}
	for _, v := range []float64{0, -1, math.Inf(1), math.NaN()} {
		m := NewModel("c")
		m.Optimizer(SGD{LR: 0.1, Clip: ClipGradValue(v)}) // the line the error names
		err := m.Err()
		if err == nil || !strings.HasPrefix(err.Error(), "sgd (dsl/clip_test.go:") || !strings.Contains(err.Error(), "ClipGradValue(") {
			t.Errorf("ClipGradValue(%v): %v, want an sgd error at dsl/clip_test.go", v, err)
		}
	}
}

func TestClipGradNorm(t *testing.T) {
	m := NewModel("c")
	m.Optimizer(Adam{LR: 1e-3, Clip: ClipGradNorm(1)})
	if m.Err() != nil || m.m.Optimizer.ClipNorm != 1 || m.m.Optimizer.ClipValue != 0 {
		t.Fatalf("%v, %+v", m.Err(), m.m.Optimizer)
	}
	m = NewModel("c")
	m.Optimizer(Adam{LR: 1e-3, Clip: ClipGradNorm(math.Inf(1))})
	if o := m.m.Optimizer; m.Err() != nil || o.ClipNorm != 0 || !o.ClipNormOff || !o.GradNorm() {
		t.Fatalf("ClipGradNorm(+Inf), compiled in and off: %v, %+v", m.Err(), o)
	}
	for _, v := range []float64{0, -1, math.Inf(-1), math.NaN()} {
		m := NewModel("c")
		m.Optimizer(AdamW{LR: 1e-3, Clip: ClipGradNorm(v)}) // the line the error names
		err := m.Err()
		if err == nil || !strings.HasPrefix(err.Error(), "adamw (dsl/clip_test.go:") || !strings.Contains(err.Error(), "ClipGradNorm(") {
			t.Errorf("ClipGradNorm(%v): %v, want an adamw error at dsl/clip_test.go", v, err)
		}
	}
}
