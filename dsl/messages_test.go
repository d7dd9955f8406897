package dsl

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
)

// TestMessagesNameTheUserOp: issue 13's unclear messages. A zero Linear
// width said "param … dimension"; Update on a non-state tensor printed
// the IR's "v5"; a user State named like Adam's moments shared their
// buffer.
func TestMessagesNameTheUserOp(t *testing.T) {
	m := NewModel("m")
	x := m.Input("x", F32, Batch, 4)
	l := line() + 1
	m.Linear("fc", x, 0)
	_, err := m.Build()
	if want := fmt.Sprintf("linear (dsl/messages_test.go:%d): fc: width 0 must be positive", l); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("zero Linear width: %v, want %q", err, want)
	}

	m = NewModel("m")
	x = m.Input("x", F32, Batch, 4)
	h := ReLU(x)
	l = line() + 1
	m.Update(h, h)
	_, err = m.Build()
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("update (dsl/messages_test.go:%d)", l)) ||
		!strings.Contains(err.Error(), "the result of relu at dsl/messages_test.go:") || strings.Contains(err.Error(), " v") {
		t.Errorf("Update on a non-state tensor: %v", err)
	}
	m = NewModel("m")
	x = m.Input("x", F32, Batch, 4)
	m.Update(x, x)
	if _, err = m.Build(); err == nil || !strings.Contains(err.Error(), `input "x"`) {
		t.Errorf("Update on an input: %v", err)
	}

	for _, name := range []string{"adam.exp_avg", "adam.exp_avg_sq"} {
		m = NewModel("m")
		x = m.Input("x", F32, Batch, 4)
		y := m.Labels("y", Batch)
		h = m.Linear("fc", x, 3)
		l = line() + 1
		s := m.State(name, F32, Const(0), 3)
		m.Update(s, Mean(h, false, 0))
		m.Output(h)
		m.Loss(CrossEntropy(h, y))
		m.Optimizer(Adam{LR: 1e-3})
		im, err := m.Build()
		if err != nil {
			t.Fatal(err)
		}
		_, err = compiler.Compile(im, compiler.Options{})
		want := fmt.Sprintf("state %q (dsl/messages_test.go:%d): the name is reserved", name, l)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("user State %s: %v, want %q", name, err, want)
		}
	}
}
