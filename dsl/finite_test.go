package dsl

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestNonFiniteArgumentsRejected: issue 13 found NaN and Inf accepted in
// numeric arguments (dropout p, the optimizer's settings, batch norm, Pow,
// initialisers), where the first step then turned every weight NaN. Each
// is rejected at the op's own line.
func TestNonFiniteArgumentsRejected(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	cases := []struct {
		name, op string
		build    func(m *Model, x *Tensor) (*Tensor, int)
	}{
		{"dropout NaN", "dropout", func(m *Model, x *Tensor) (*Tensor, int) { l := line(); return Dropout(x, nan), l }},
		{"pow Inf", "powc", func(m *Model, x *Tensor) (*Tensor, int) { l := line(); return Pow(x, inf), l }},
		{"scale NaN", "scale", func(m *Model, x *Tensor) (*Tensor, int) { l := line(); return Scale(x, nan), l }},
		{"addc -Inf", "addc", func(m *Model, x *Tensor) (*Tensor, int) { l := line(); return AddScalar(x, -inf), l }},
		{"init NaN", "param", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			w := m.Param("w", F32, Uniform(nan, 1), 4, 4)
			return MatMul(x, w), l
		}},
		{"init Inf std", "param", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			w := m.Param("w", F32, Normal(0, inf), 4, 4)
			return MatMul(x, w), l
		}},
	}
	for _, c := range cases {
		m := NewModel("m")
		x := m.Input("x", F32, Batch, 4)
		y := m.Labels("y", Batch)
		h, l := c.build(m, x)
		m.Output(h)
		m.Loss(CrossEntropy(h, y))
		m.Optimizer(Adam{LR: 1e-3})
		_, err := m.Build()
		want := fmt.Sprintf("%s (dsl/finite_test.go:%d)", c.op, l)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, want)
		}
	}
	opts := []struct {
		name string
		o    Optimizer
	}{
		{"adam lr NaN", Adam{LR: nan}},
		{"adam lr Inf", Adam{LR: inf}},
		{"adam beta1 NaN", Adam{LR: 1e-3, Beta1: nan}},
		{"adam beta2 NaN", Adam{LR: 1e-3, Beta2: nan}},
		{"adam eps Inf", Adam{LR: 1e-3, Eps: inf}},
		{"adamw decay NaN", AdamW{LR: 1e-3, WeightDecay: nan}},
		{"sgd momentum NaN", SGD{LR: 0.1, Momentum: nan}},
		{"sgd dampening Inf", SGD{LR: 0.1, Momentum: 0.9, Dampening: inf}},
		{"sgd decay -Inf", SGD{LR: 0.1, WeightDecay: -inf}},
	}
	for _, c := range opts {
		m := NewModel("m")
		x := m.Input("x", F32, Batch, 4)
		y := m.Labels("y", Batch)
		h := m.Linear("fc", x, 3)
		m.Output(h)
		m.Loss(CrossEntropy(h, y))
		l := line() + 1
		m.Optimizer(c.o)
		_, err := m.Build()
		want := fmt.Sprintf("(dsl/finite_test.go:%d)", l)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, want)
		}
	}
	for _, bn := range []BatchNorm{{Momentum: nan}, {Eps: nan}, {Eps: inf}} {
		m := NewModel("m")
		x := m.Input("x", F32, Batch, 2, 4, 4)
		l := line() + 1
		m.BatchNorm2d("bn", x, bn)
		_, err := m.Build()
		want := fmt.Sprintf("batchnorm2d (dsl/finite_test.go:%d)", l)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("batch norm %+v: err = %v, want %q", bn, err, want)
		}
	}
}
