package dsl

import (
	"fmt"
	"strings"
	"testing"
)

// TestAdversarialDeclarations: declarations the second adversarial pass
// found building without a word: a layer named "" (parameters ".weight"),
// a newline in a name, initialisers torch.nn.init refuses, and a second
// Optimizer or Loss call that replaced the first, and a nil tensor handed
// to a layer (reported lines later, at the loss, as a shape mismatch).
// Each fails at its line.
func TestAdversarialDeclarations(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(m *Model, x *Tensor) int
		want  string
	}{
		{"empty layer name", func(m *Model, x *Tensor) int {
			l := line() + 1
			m.Linear("", x, 3)
			return l
		}, `param (dsl/names_test.go:%d): name ".weight" has an empty part`},
		{"newline", func(m *Model, x *Tensor) int {
			l := line() + 1
			m.Linear("a\nb", x, 3)
			return l
		}, `param (dsl/names_test.go:%d): name "a\nb.weight" holds the control character U+000A`},
		{"double dot", func(m *Model, x *Tensor) int {
			l := line() + 1
			m.State("bn..mean", F32, Const(0), 3)
			return l
		}, `state (dsl/names_test.go:%d): name "bn..mean" has an empty part`},
		{"uniform lo > hi", func(m *Model, x *Tensor) int {
			l := line() + 1
			m.Param("w", F32, Uniform(1, -1), 4, 3)
			return l
		}, "param (dsl/names_test.go:%d): w: initialiser uniform(1, -1) needs lo ≤ hi"},
		{"normal std < 0", func(m *Model, x *Tensor) int {
			l := line() + 1
			m.Param("w", F32, Normal(0, -1), 4, 3)
			return l
		}, "param (dsl/names_test.go:%d): w: initialiser normal(0, -1) needs a standard deviation ≥ 0"},
		{"nil from ReLU into Linear", func(m *Model, x *Tensor) int {
			var z *Tensor
			l := line() + 1
			m.Linear("fc", ReLU(z), 3)
			return l
		}, "linear (dsl/names_test.go:%d): fc: the input is nil"},
		{"nil from Concat() into Conv2d", func(m *Model, x *Tensor) int {
			l := line() + 1
			m.Conv2d("c", Concat(1), 3, 1)
			return l
		}, "conv2d (dsl/names_test.go:%d): c: the input is nil"},
		{"nil value into Update", func(m *Model, x *Tensor) int {
			s := m.State("s", F32, Const(0), 3)
			l := line() + 1
			m.Update(s, nil)
			return l
		}, "update (dsl/names_test.go:%d): Update: the value is nil"},
		{"second loss", func(m *Model, x *Tensor) int {
			m.Loss(Mean(x, false, 0, 1))
			l := line() + 1
			m.Loss(Sum(x, false, 0, 1))
			return l
		}, "loss (dsl/names_test.go:%d): the loss is already set"},
		{"param and state of one name", func(m *Model, x *Tensor) int {
			m.Param("w", F32, Const(0), 3)
			l := line() + 1
			m.State("w", F32, Const(0), 3)
			return l
		}, `state (dsl/names_test.go:%d): state "w" declared twice`},
		{"second output", func(m *Model, x *Tensor) int {
			m.Output(x)
			l := line() + 1
			m.Output(ReLU(x))
			return l
		}, "output (dsl/names_test.go:%d): the output is already set"},
		{"second optimizer", func(m *Model, x *Tensor) int {
			m.Optimizer(SGD{LR: 0.1})
			l := line() + 1
			m.Optimizer(Adam{LR: 0.1})
			return l
		}, "optimizer (dsl/names_test.go:%d): the optimizer is already set"},
	} {
		m := NewModel("adv")
		x := m.Input("x", F32, Batch, 4)
		l := c.build(m, x)
		want := fmt.Sprintf(c.want, l)
		if err := m.Err(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, want)
		}
	}
	// What PyTorch allows still builds: a dotted Param name, Normal(0, 0).
	m := NewModel("ok")
	m.Input("x", F32, Batch, 4)
	m.Param("fc.weight", F32, Normal(0, 0), 3, 4)
	if err := m.Err(); err != nil {
		t.Fatal(err)
	}
}
