package dsl

import (
	"fmt"
	"math"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// Recurrent holds the options of RNN and LSTM, named as torch.nn.RNN's.
type Recurrent struct {
	NumLayers    int    // default 1
	BatchFirst   bool   // x is [B, T, features] (else [T, B, features])
	Nonlinearity string // RNN only: "tanh" (default) or "relu"
	// H0 and C0 are the initial states [NumLayers, B, hidden]; nil for
	// zeros. C0 is the LSTM's.
	H0, C0 *Tensor
	// Mask, an i32 [B, T] input, is 0 at the steps of a sequence that
	// hold no token (padding): the state carries over them unchanged, so
	// padding never changes the result. nil: every step counts.
	Mask *Tensor
}

// RNN is torch.nn.RNN(features, hidden, num_layers, nonlinearity,
// batch_first) applied to x with initial state o.H0: it returns the last
// layer's output at every step and hn [NumLayers, B, hidden]. Parameters
// are named and shaped as PyTorch's state_dict (name.weight_ih_l0 [hidden,
// features], weight_hh_l0, bias_ih_l0, bias_hh_l0, ...), initialised
// U(-1/√hidden, 1/√hidden). Each layer's recurrence is one loop over time
// (rnn_scan).
func (m *Model) RNN(name string, x *Tensor, hidden int, o ...Recurrent) (out, hn *Tensor) {
	pos := callerPos()
	opt, ok := single(m, pos, "rnn", o)
	if !ok {
		return m.errTensor(x), m.errTensor(x)
	}
	if opt.C0 != nil {
		m.fail(pos, "rnn", "%s: C0 is the LSTM's cell state; an RNN has H0 only", name)
		return m.errTensor(x), m.errTensor(x)
	}
	cell := "rnn_tanh"
	switch opt.Nonlinearity {
	case "", "tanh":
	case "relu":
		cell = "rnn_relu"
	default:
		m.fail(pos, "rnn", "%s: nonlinearity %q (want tanh or relu)", name, opt.Nonlinearity)
		return m.errTensor(x), m.errTensor(x)
	}
	out, hn, _ = m.recurrent(pos, "rnn", cell, name, x, hidden, opt)
	return out, hn
}

// LSTM is torch.nn.LSTM(features, hidden, num_layers, batch_first) applied
// to x with initial states o.H0 and o.C0: it returns the last layer's
// output at every step, hn and cn [NumLayers, B, hidden]. Gate order i, f,
// g, o and both biases as PyTorch's (weight_ih_l0 is [4·hidden,
// features]).
func (m *Model) LSTM(name string, x *Tensor, hidden int, o ...Recurrent) (out, hn, cn *Tensor) {
	pos := callerPos()
	opt, ok := single(m, pos, "lstm", o)
	if !ok {
		t := m.errTensor(x)
		return t, t, t
	}
	if opt.Nonlinearity != "" {
		// torch.nn.LSTM has no nonlinearity: its gates are fixed.
		m.fail(pos, "lstm", "%s: nonlinearity %q: an LSTM's gates are fixed (Nonlinearity is the RNN's)", name, opt.Nonlinearity)
		t := m.errTensor(x)
		return t, t, t
	}
	return m.recurrent(pos, "lstm", "lstm", name, x, hidden, opt)
}

func (m *Model) recurrent(pos ir.Pos, op, cell, name string, x *Tensor, hidden int, o Recurrent) (out, hn, cn *Tensor) {
	bad := func(format string, args ...any) (*Tensor, *Tensor, *Tensor) {
		m.fail(pos, op, "%s: %s", name, fmt.Sprintf(format, args...))
		t := m.errTensor(x)
		return t, t, t
	}
	if m.err != nil || m.isNil(pos, op, name, "the input", x) {
		t := m.errTensor(x)
		return t, t, t
	}
	layers := o.NumLayers
	if layers == 0 {
		layers = 1
	}
	if layers < 0 || hidden < 1 {
		return bad("num_layers %d and hidden size %d must be positive", layers, hidden)
	}
	s := x.v.Shape
	if len(s) != 3 || s[2].Sym != "" || !x.v.DType.IsFloat() {
		return bad("input %s must be a float [B, T, features] (batch_first) or [T, B, features] tensor", x.v.Type())
	}
	m.b.Pos = pos
	h := x.v
	if !o.BatchFirst {
		h = m.b.Op("permute", ir.Attrs{Perm: []int{1, 0, 2}}, h)
	}
	for _, t := range []*Tensor{o.H0, o.C0, o.Mask} {
		if t != nil && (zero(t) || t.m != m) {
			return bad("an initial state or the mask is a zero dsl.Tensor or belongs to another model")
		}
	}
	B := h.Shape[0]
	states := ir.Shape{ir.D(layers), B, ir.D(hidden)}
	for _, st := range []struct {
		n string
		t *Tensor
	}{{"h0", o.H0}, {"c0", o.C0}} {
		if st.t != nil && (!st.t.v.Shape.Eq(states) || st.t.v.DType != x.v.DType) {
			return bad("initial state %s is %s, want %s%s", st.n, st.t.v.Type(), x.v.DType, states)
		}
	}
	if mk := o.Mask; mk != nil && (mk.v.DType != ir.I32 || !mk.v.Shape.Eq(h.Shape[:2])) {
		return bad("step mask %s, want i32%s", mk.v.Type(), h.Shape[:2])
	}
	layerState := func(t *Tensor, l int) *ir.Value {
		if t == nil {
			return nil
		}
		v := m.b.Op("slice", ir.Attrs{Axes: []int{0}, Ints: []int{l, l + 1}}, t.v)
		return m.b.Op("reshape", ir.Attrs{Shape: ir.Shape{B, ir.D(hidden)}}, v)
	}
	G := ops.Cells[cell].Gates
	bound := 1 / math.Sqrt(float64(hidden))
	dt := x.v.DType
	var hns, cns []*ir.Value
	for l := 0; l < layers; l++ {
		in := h.Shape[2].N
		p := func(kind string, shape ...int) *ir.Value {
			return m.declare(ir.Param, "rnn."+strings.Split(kind, "_")[0], fmt.Sprintf("%s.%s_l%d", name, kind, l), dt, Uniform(-bound, bound), ir.Static(shape...), pos).v
		}
		wih, whh := p("weight_ih", G*hidden, in), p("weight_hh", G*hidden, hidden)
		bih, bhh := p("bias_ih", G*hidden), p("bias_hh", G*hidden)
		var hl, cl *ir.Value
		var mask *ir.Value
		if o.Mask != nil {
			mask = o.Mask.v
		}
		h, hl, cl = ops.MaskedRecurrent(m.b, cell, h, wih, whh, bih, bhh, layerState(o.H0, l), layerState(o.C0, l), mask)
		if m.b.Err != nil {
			break
		}
		hns, cns = append(hns, hl), append(cns, cl)
	}
	if m.b.Err != nil {
		if m.err == nil {
			m.err = m.b.Err
		}
		t := m.errTensor(x)
		return t, t, t
	}
	stack := func(vs []*ir.Value) *Tensor {
		if vs[0] == nil {
			return nil
		}
		parts := make([]*ir.Value, len(vs))
		for i, v := range vs {
			parts[i] = m.b.Op("reshape", ir.Attrs{Shape: ir.Shape{ir.D(1), B, ir.D(hidden)}}, v)
		}
		if len(parts) == 1 {
			return &Tensor{m, parts[0]}
		}
		return &Tensor{m, m.b.Op("concat", ir.Attrs{Axes: []int{0}}, parts...)}
	}
	if !o.BatchFirst {
		h = m.b.Op("permute", ir.Attrs{Perm: []int{1, 0, 2}}, h)
	}
	out, hn, cn = &Tensor{m, h}, stack(hns), stack(cns)
	if m.b.Err != nil && m.err == nil {
		m.err = m.b.Err
	}
	return out, hn, cn
}

// OutputNamed marks a further result of the forward pass, read back by
// name after Predict (Session().Lookup("output", name)): an RNN's final
// states, say, to carry into the next call.
func (m *Model) OutputNamed(name string, t *Tensor) {
	pos := callerPos()
	if m.err != nil || m.isNil(pos, "output", name, "the tensor", t) {
		return
	}
	switch {
	case t.m != m:
		m.fail(pos, "output", "tensor belongs to another model")
	case name == "" || name == "output" || name == "loss":
		m.fail(pos, "output", "output name %q is empty or reserved", name)
	case m.m.Forward.Outputs[name] != nil:
		m.fail(pos, "output", "output %q declared twice", name)
	default:
		m.m.Forward.Outputs[name] = t.v
	}
}
