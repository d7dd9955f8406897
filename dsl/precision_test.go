package dsl

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
)

// ampMLP declares a small MLP; prec runs after the inputs are declared.
func ampMLP(dt DType, prec func(m *Model)) *Model {
	m := NewModel("amp")
	x := m.Input("x", dt, Batch, 8)
	y := m.Labels("y", Batch)
	prec(m)
	h := m.Linear("fc2", ReLU(m.Linear("fc1", x, 6)), 3)
	m.Output(h)
	m.Loss(CrossEntropy(h, y))
	m.Optimizer(SGD{LR: 0.1})
	return m
}

// TestPrecisionErrors: a bad policy is an error at the user's Precision
// call (or at the op it cannot cover), naming it.
func TestPrecisionErrors(t *testing.T) {
	var l int
	for _, c := range []struct {
		name string
		dt   DType
		prec func(m *Model)
		want string
	}{
		{"f16 not built", F32, func(m *Model) { l = line(); m.Precision(AMP{Type: F16}) },
			"precision (dsl/precision_test.go:%d): f16 mixed precision needs dynamic loss scaling"},
		{"not a 16-bit type", F32, func(m *Model) { l = line(); m.Precision(AMP{Type: F32}) },
			"precision (dsl/precision_test.go:%d): AMP type f32: want dsl.BF16 or dsl.F16"},
		{"twice", F32, func(m *Model) {
			m.Precision(AMP{Type: BF16})
			l = line() + 1
			m.Precision(AMP{Type: BF16})
		}, "precision (dsl/precision_test.go:%d): the precision is already set"},
		{"f64 model", F64, func(m *Model) { l = line(); m.Precision(AMP{Type: BF16}) },
			"precision (dsl/precision_test.go:%d): mixed precision needs an f32 model, but input \"x\""},
	} {
		_, err := ampMLP(c.dt, c.prec).Build()
		if want := fmt.Sprintf(c.want, l); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", c.name, err, want)
		}
	}

	// A parameter declared in a 16-bit type: master weights are f32.
	m := NewModel("m")
	l = line() + 1
	m.Param("w", BF16, Const(0), 3)
	if _, err := m.Build(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("param (dsl/precision_test.go:%d): w: dtype bf16", l)) {
		t.Errorf("bf16 param: %v", err)
	}

	// An op autocast would run in bf16 that is not built yet: the error
	// names it at its line.
	m = NewModel("m")
	m.Precision(AMP{Type: BF16})
	x := m.Input("x", F32, Batch, 5, 4)
	y := m.Labels("y", Batch)
	l = line() + 1
	out, _ := m.RNN("rnn", x, 6, Recurrent{BatchFirst: true})
	h := m.Linear("fc", Mean(out, false, 1), 3)
	m.Output(h)
	m.Loss(CrossEntropy(h, y))
	m.Optimizer(SGD{LR: 0.1})
	im, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	_, err = compiler.Compile(im, compiler.Options{Fuse: true})
	if want := fmt.Sprintf("rnn_scan (dsl/precision_test.go:%d): mixed precision (bf16, set at dsl/precision_test.go:", l); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("RNN under AMP: %v, want %q", err, want)
	}
}
