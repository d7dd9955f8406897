package dsl

import (
	"encoding/json"
	"fmt"
	"reflect"
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

func TestLinearParamsAndReshape(t *testing.T) {
	m := NewModel("lin")
	x := m.Input("x", F32, Batch, 4, 6)
	flat := Reshape(x, Batch, 24)
	if flat.Shape() != "[B,24]" {
		t.Fatalf("Reshape: %s", flat.Shape())
	}
	h := m.Linear("fc", flat, 10)
	if h.Shape() != "[B,10]" || h.DType() != F32 {
		t.Fatalf("Linear: %s %s", h.Shape(), h.DType())
	}
	nb := m.LinearNoBias("proj", h, 3)
	if nb.Shape() != "[B,3]" {
		t.Fatalf("LinearNoBias: %s", nb.Shape())
	}
	params := m.m.Forward.Params()
	var got []string
	for _, p := range params {
		got = append(got, fmt.Sprintf("%s%s=%s", p.Name, p.Shape, p.Attrs.Init))
	}
	// torch.nn.Linear(24, 10): kaiming_uniform(a=√5) on the weight and the
	// bias both give U(-1/√24, 1/√24).
	want := "fc.weight[10,24]=uniform:-0.20412414523193154:0.20412414523193154 " +
		"fc.bias[10]=uniform:-0.20412414523193154:0.20412414523193154 " +
		"proj.weight[3,10]=uniform:-0.31622776601683794:0.31622776601683794"
	if strings.Join(got, " ") != want {
		t.Fatalf("params:\n%s\nwant\n%s", strings.Join(got, " "), want)
	}
	if r := Reshape(x, Batch, 25); m.Err() == nil || !strings.Contains(m.Err().Error(), "reshape (dsl/dsl_test.go:") || r == nil {
		t.Fatalf("bad reshape: %v", m.Err())
	}
}

func TestFirstErrorKept(t *testing.T) {
	m := NewModel("e")
	x := m.Input("x", F32, Batch, 3)
	l := line() + 1
	bad := Add(x, m.Input("z", F32, Batch, 4))
	h := ReLU(m.Linear("fc", bad, 2)) // no-op: bad carries the error
	m.Loss(Sum(h, false))
	want := fmt.Sprintf("add (dsl/dsl_test.go:%d): shapes [B,3] and [B,4] do not broadcast", l)
	if err := m.Err(); err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("err = %v, want prefix %q", err, want)
	}
	if _, err := m.Build(); err != m.Err() {
		t.Fatalf("Build returned %v", err)
	}
}

func TestDropoutStreams(t *testing.T) {
	m := NewModel("d")
	x := m.Input("x", F32, Batch, 3)
	a := Dropout(x, 0.1)
	b := Dropout(a, 0)   // identity, no stream
	c := Dropout(b, 0.5) // second stream
	if a.v.Attrs.I != 1 || c.v.Attrs.I != 2 || b != a || c.v.Attrs.F != 0.5 {
		t.Fatalf("streams %d %d", a.v.Attrs.I, c.v.Attrs.I)
	}
	Dropout(c, 1)
	if m.Err() == nil || !strings.Contains(m.Err().Error(), "dropout") {
		t.Fatalf("p=1 accepted: %v", m.Err())
	}
}

func TestBuildChecks(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		loss, opt  bool
	}{
		{"ok", "no loss", false, true},
		{"ok", "no optimizer", true, false},
		{"", "empty model name", true, true},
		{" ", "empty model name", true, true},
	} {
		m := NewModel(tc.name)
		x := m.Input("x", F32, Batch, 3)
		m.Output(x)
		if tc.loss {
			m.Loss(Mean(x, false))
		}
		if tc.opt {
			m.Optimizer(SGD{LR: 0.1})
		}
		if _, err := m.Build(); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "dsl_test.go:") {
			t.Errorf("%q: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	m := NewModel("v1")
	if got := m.m.Source; got != "dsl/dsl_test.go" {
		t.Errorf("Source = %q", got)
	}
	m.Loss(Sum(m.Input("x", F32, Batch, 2), true))
	if m.Err() == nil || !strings.Contains(m.Err().Error(), "loss must be a scalar") {
		t.Errorf("non-scalar loss: %v", m.Err())
	}
}

func TestOptimizerDefaults(t *testing.T) {
	lower := func(o Optimizer) ir.Optimizer {
		m := NewModel("o")
		m.Optimizer(o)
		if m.Err() != nil {
			t.Fatal(m.Err())
		}
		lo := *m.m.Optimizer
		lo.Pos = ir.Pos{}
		return lo
	}
	if o := lower(Adam{LR: 1e-3}); !reflect.DeepEqual(o, ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}) {
		t.Errorf("Adam defaults: %+v", o)
	}
	if o := lower(AdamW{LR: 1e-3}); o.Kind != "adamw" || o.WeightDecay != 1e-2 {
		t.Errorf("AdamW defaults: %+v", o)
	}
	if o := lower(AdamW{LR: 1e-3, NoWeightDecay: true}); o.WeightDecay != 0 {
		t.Errorf("AdamW NoWeightDecay: %+v", o)
	}
	if o := lower(AdamW{LR: 1e-3, WeightDecay: 0.1, Beta1: 0.8}); o.WeightDecay != 0.1 || o.Beta1 != 0.8 {
		t.Errorf("AdamW explicit: %+v", o)
	}
	if o := lower(SGD{LR: 0.1, Momentum: 0.9, Nesterov: true}); !reflect.DeepEqual(o, ir.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9, Nesterov: true}) {
		t.Errorf("SGD: %+v", o)
	}
	for _, tc := range []struct {
		o    Optimizer
		want string
	}{
		{SGD{LR: 0.1, Momentum: 0.9, Dampening: 0.1, Nesterov: true}, "sgd (dsl/dsl_test.go:"},
		{SGD{}, "sgd (dsl/dsl_test.go:"},
		{Adam{LR: 1e-3, Beta2: -0.1}, "adam (dsl/dsl_test.go:"},
		{AdamW{LR: 1e-3, WeightDecay: -1}, "adamw (dsl/dsl_test.go:"},
		{nil, "optimizer (dsl/dsl_test.go:"},
	} {
		m := NewModel("o")
		m.Optimizer(tc.o)
		if m.Err() == nil || !strings.HasPrefix(m.Err().Error(), tc.want) {
			t.Errorf("%#v: err = %v, want %q", tc.o, m.Err(), tc.want)
		}
	}
}
