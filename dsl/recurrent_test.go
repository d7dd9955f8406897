package dsl

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

func TestRecurrentLayers(t *testing.T) {
	m := NewModel("seq")
	x := m.Tokens("x", Batch, 7)
	e := m.Embedding("emb", x, 37, 11, F32)
	h0 := m.Input("h0", F32, 2, Batch, 13)
	c0 := m.Input("c0", F32, 2, Batch, 13)
	out, hn, cn := m.LSTM("lstm", e, 13, Recurrent{NumLayers: 2, BatchFirst: true, H0: h0, C0: c0})
	rout, rhn := m.RNN("rnn", Transpose(e, 0, 1), 5, Recurrent{Nonlinearity: "relu"})
	for _, c := range []struct {
		got  *Tensor
		want string
	}{{out, "[B,7,13]"}, {hn, "[2,B,13]"}, {cn, "[2,B,13]"}, {rout, "[7,B,5]"}, {rhn, "[1,B,5]"}} {
		if c.got.Shape() != c.want {
			t.Errorf("shape %s, want %s", c.got.Shape(), c.want)
		}
	}
	if err := m.Err(); err != nil {
		t.Fatal(err)
	}
	// PyTorch's state_dict names and shapes.
	want := map[string]string{
		"lstm.weight_ih_l0": "[52,11]", "lstm.weight_hh_l0": "[52,13]", "lstm.bias_ih_l0": "[52]", "lstm.bias_hh_l0": "[52]",
		"lstm.weight_ih_l1": "[52,13]", "lstm.weight_hh_l1": "[52,13]", "lstm.bias_ih_l1": "[52]", "lstm.bias_hh_l1": "[52]",
		"rnn.weight_ih_l0": "[5,11]", "rnn.weight_hh_l0": "[5,5]", "rnn.bias_ih_l0": "[5]", "rnn.bias_hh_l0": "[5]",
	}
	n := 0
	for _, v := range m.m.Forward.Values {
		if v.Role == ir.Param && v.Name != "emb.weight" {
			n++
			if want[v.Name] != v.Shape.String() {
				t.Errorf("param %s %s, want %s", v.Name, v.Shape, want[v.Name])
			}
		}
	}
	if n != len(want) {
		t.Errorf("%d recurrent params, want %d", n, len(want))
	}
}

func TestRecurrentErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func(m *Model, e *Tensor) int
		want string
	}{
		{"initial state shape", func(m *Model, e *Tensor) int {
			h0 := m.Input("h0", F32, 1, Batch, 12)
			l := line() + 1
			m.LSTM("lstm", e, 13, Recurrent{NumLayers: 2, BatchFirst: true, H0: h0})
			return l
		}, "lstm (dsl/recurrent_test.go:%d): lstm: initial state h0 is f32[1,B,12], want f32[2,B,13]"},
		{"nonlinearity", func(m *Model, e *Tensor) int {
			l := line() + 1
			m.RNN("rnn", e, 13, Recurrent{Nonlinearity: "sigmoid"})
			return l
		}, "rnn (dsl/recurrent_test.go:%d): rnn: nonlinearity \"sigmoid\""},
		{"mask shape", func(m *Model, e *Tensor) int {
			mask := m.Tokens("mask", Batch, 6)
			l := line() + 1
			m.RNN("rnn", e, 13, Recurrent{BatchFirst: true, Mask: mask})
			return l
		}, "rnn (dsl/recurrent_test.go:%d): rnn: step mask i32[B,6], want i32[B,7]"},
	} {
		m := NewModel("bad")
		e := m.Embedding("emb", m.Tokens("x", Batch, 7), 37, 11, F32)
		l := c.f(m, e)
		if err := m.Err(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf(c.want, l)) {
			t.Errorf("%s: err = %v, want %q", c.name, err, fmt.Sprintf(c.want, l))
		}
	}
}
