package dsl

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

func line() int { _, _, l, _ := runtime.Caller(1); return l }

func TestShapeErrorNamesUserLine(t *testing.T) {
	m := NewModel("bad")
	x := m.Input("x", F32, Batch, 784)
	w := m.Param("w", F32, Const(0), 100, 10)
	l := line() + 1
	y := MatMul(x, w)
	m.Loss(Sum(y, false))
	_, err := m.Build()
	want := fmt.Sprintf("matmul (dsl/dsl_test.go:%d): inner dimensions differ: [B,784] × [100,10]", l)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

func TestLinearShapesAndJSON(t *testing.T) {
	m := NewModel("ok")
	x := m.Input("x", F32, Batch, 5, 7)
	y := m.Labels("y", Batch, 5)
	h := m.Linear("fc", x, 3)
	if h.Shape() != "[B,5,3]" {
		t.Fatalf("Linear on rank 3: %s", h.Shape())
	}
	m.Output(h)
	m.Loss(CrossEntropy(h, y))
	m.Optimizer(AdamW{LR: 1e-3})
	model, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	if o := model.Optimizer; o.WeightDecay != 1e-2 || o.Beta2 != 0.999 {
		t.Fatalf("AdamW defaults: %+v", o)
	}
	b, err := json.Marshal(model)
	if err != nil {
		t.Fatal(err)
	}
	var back ir.Model
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Forward.Print() != model.Forward.Print() {
		t.Fatalf("JSON round trip changed the model:\n%s\nvs\n%s", back.Forward.Print(), model.Forward.Print())
	}
}

func TestOptimizerValidation(t *testing.T) {
	for _, o := range []Optimizer{SGD{LR: 0.1, Nesterov: true}, Adam{LR: -1}, Adam{LR: 1, Beta1: 1.5}} {
		m := NewModel("o")
		m.Optimizer(o)
		if m.Err() == nil || !strings.Contains(m.Err().Error(), "dsl_test.go:") {
			t.Errorf("%#v: err = %v", o, m.Err())
		}
	}
}
