package dsl

import (
	"math"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// Transformer building blocks with PyTorch's parameterisation, so that
// state_dict names and shapes map one to one: LayerNorm, Softmax,
// MultiheadAttention and a sinusoidal positional encoding. The layers
// (encoder, decoder, the whole torch.nn.Transformer, a pre-LN decoder-only
// block) are in transformer_layers.go.

// LayerNorm is torch.nn.LayerNorm(D) over the last axis of x, with
// weight (1) and bias (0) [D], eps 1e-5 unless given. One fused kernel
// forward, one backward (compiler/ops/layernorm.go).
func (m *Model) LayerNorm(name string, x *Tensor, eps ...float64) *Tensor {
	return m.layerNorm(callerPos(), name, x, eps...)
}

func (m *Model) layerNorm(pos ir.Pos, name string, x *Tensor, eps ...float64) *Tensor {
	if m.err != nil || m.isNil(pos, "layernorm", name, "the input", x) {
		return m.errTensor(x)
	}
	s := x.v.Shape
	if len(s) < 2 || s[len(s)-1].Sym != "" {
		m.fail(pos, "layernorm", "%s: input %s needs a static last dimension and a leading one", name, s)
		return x
	}
	var e float64
	switch {
	case len(eps) > 1:
		m.fail(pos, "layernorm", "%s: %d eps values given: pass one at most", name, len(eps))
		return x
	case len(eps) == 1:
		e = eps[0]
	}
	switch {
	case len(eps) == 0:
		e = 1e-5
	case !(e > 0) || math.IsInf(e, 0): // NaN too
		// A negative or NaN eps passed the forward's square root a
		// negative or NaN variance: NaN outputs from the first step.
		m.fail(pos, "layernorm", "%s: eps %g must be positive and finite", name, e)
		return x
	}
	d := s[len(s)-1].N
	w := m.declare(ir.Param, "layernorm.weight", name+".weight", x.v.DType, Const(1), ir.Static(d), pos)
	b := m.declare(ir.Param, "layernorm.bias", name+".bias", x.v.DType, Const(0), ir.Static(d), pos)
	return m.op(pos, "layernorm", ir.Attrs{F: e}, x, w, b)
}

// Softmax is torch.softmax(x, axis), numerically stable.
func Softmax(x *Tensor, axis int) *Tensor {
	if zero(x) {
		return nil
	}
	return x.m.op(callerPos(), "softmax", ir.Attrs{Axes: []int{axis}}, x)
}

// MaskedSoftmax is softmax along the last axis of x [N, ..., L] with
// attention masks: causal masks element j of row i (the second-to-last
// coordinate) where j > i, and keyPadding (i32 [N, L], or nil) where it is
// non-zero. Masked elements are 0; a fully masked row is all zeros
// (PyTorch gives NaN there), with zero gradient.
func MaskedSoftmax(x *Tensor, causal bool, keyPadding *Tensor) *Tensor {
	if zero(x) {
		return nil
	}
	attrs := ir.Attrs{Axes: []int{-1}}
	if causal {
		attrs.Str = "causal"
	}
	args := []*Tensor{x}
	if keyPadding != nil {
		args = append(args, keyPadding)
	}
	return x.m.op(callerPos(), "softmax", attrs, args...)
}

// Attention holds MultiheadAttention's forward options.
type Attention struct {
	// Causal masks key j for query i where j > i, as the attn_mask of
	// torch.nn.Transformer.generate_square_subsequent_mask.
	Causal bool
	// KeyPadding, an i32 [B, Tk] input (Model.Tokens or Labels), masks
	// the keys where it is non-zero (PyTorch's key_padding_mask). A
	// query whose every key is masked attends to nothing: its attention
	// output is 0 (PyTorch gives NaN).
	KeyPadding *Tensor
	// Dropout is the attention weights' dropout probability in training.
	Dropout float64
}

// MultiheadAttention is torch.nn.MultiheadAttention(E, heads,
// batch_first=True) applied to query [B, Tq, E], key and value [B, Tk, E]
// (pass one tensor three times for self-attention): parameters
// name.in_proj_weight [3E, E] (xavier uniform), name.in_proj_bias [3E]
// (0), name.out_proj.weight [E, E] and name.out_proj.bias [E] (0). Self-
// attention projects Q, K and V in one GEMM; the attention core is one
// flash-style kernel that never stores the Tq×Tk scores.
func (m *Model) MultiheadAttention(name string, query, key, value *Tensor, heads int, o ...Attention) *Tensor {
	pos := callerPos()
	opt, ok := single(m, pos, "multihead_attention", o)
	if !ok {
		return m.errTensor(query)
	}
	return m.mha(pos, name, query, key, value, heads, opt)
}

func (m *Model) mha(pos ir.Pos, name string, query, key, value *Tensor, heads int, o Attention) *Tensor {
	if m.err != nil || m.isNil(pos, "multihead_attention", name, "the query", query) ||
		m.isNil(pos, "multihead_attention", name, "the key", key) || m.isNil(pos, "multihead_attention", name, "the value", value) {
		return m.errTensor(query)
	}
	s := query.v.Shape
	if len(s) != 3 || s[2].Sym != "" {
		m.fail(pos, "multihead_attention", "%s: query %s must be [B, T, E]", name, s)
		return query
	}
	if !(o.Dropout >= 0 && o.Dropout < 1) { // NaN too
		m.fail(pos, "multihead_attention", "%s: dropout %g outside [0, 1)", name, o.Dropout)
		return query
	}
	e, dt := s[2].N, query.v.DType
	xavier := math.Sqrt(6 / float64(e+3*e))
	bound := 1 / math.Sqrt(float64(e))
	inW := m.declare(ir.Param, "attention.weight", name+".in_proj_weight", dt, Uniform(-xavier, xavier), ir.Static(3*e, e), pos)
	inB := m.declare(ir.Param, "attention.bias", name+".in_proj_bias", dt, Const(0), ir.Static(3*e), pos)
	outW := m.declare(ir.Param, "attention.weight", name+".out_proj.weight", dt, Uniform(-bound, bound), ir.Static(e, e), pos)
	outB := m.declare(ir.Param, "attention.bias", name+".out_proj.bias", dt, Const(0), ir.Static(e), pos)
	opts := ops.MHAOptions{Heads: heads, Causal: o.Causal, Dropout: o.Dropout}
	if o.KeyPadding != nil {
		if m.isNil(pos, "multihead_attention", name, "the key padding mask", o.KeyPadding) {
			return query
		}
		if o.KeyPadding.m != m {
			m.fail(pos, "multihead_attention", "%s: key padding mask belongs to another model", name)
			return query
		}
		opts.KeyPadding = o.KeyPadding.v
	}
	if o.Dropout > 0 {
		m.stream++
		opts.Stream = m.stream
	}
	for _, t := range []*Tensor{key, value} {
		if t.m != m {
			m.fail(pos, "multihead_attention", "%s: key or value belongs to another model", name)
			return query
		}
	}
	m.b.Pos = pos
	v := ops.MultiheadAttention(m.b, query.v, key.v, value.v, inW.v, inB.v, outW.v, outB.v, opts)
	if m.b.Err != nil {
		if m.err == nil {
			m.err = m.b.Err
		}
		return query
	}
	return &Tensor{m, v}
}

// PositionalEncoding adds the sinusoidal table of "Attention Is All You
// Need" (PyTorch's tutorial PositionalEncoding: pe[p, 2i] = sin(p /
// 10000^(2i/D)), pe[p, 2i+1] = cos(...)) to x [B, T, D], then dropout p.
// The table, name.pe [maxLen, D], is a state buffer (saved in checkpoints,
// never trained; calls with one name share it); a sequence longer than
// maxLen is an error naming this line.
func (m *Model) PositionalEncoding(name string, x *Tensor, maxLen int, p float64) *Tensor {
	pos := callerPos()
	if m.err != nil || m.isNil(pos, "positional_encoding", name, "the input", x) {
		return m.errTensor(x)
	}
	s := x.v.Shape
	if len(s) != 3 || s[1].Sym != "" || s[2].Sym != "" {
		m.fail(pos, "positional_encoding", "%s: input %s must be [B, T, D] with static T and D", name, s)
		return x
	}
	t, d := s[1].N, s[2].N
	if t > maxLen {
		m.fail(pos, "positional_encoding", "%s: sequence length %d is longer than the table's %d positions", name, t, maxLen)
		return x
	}
	// One table per name: encoding source and target with the same
	// module reads one buffer, as in PyTorch.
	var pe *Tensor
	if v := m.m.Forward.Lookup(ir.State, name+".pe"); v != nil && v.Shape.Eq(ir.Static(maxLen, d)) && v.DType == x.v.DType {
		pe = &Tensor{m, v}
	} else {
		pe = m.declare(ir.State, "", name+".pe", x.v.DType, Init{"sinusoid", float64(d), 0}, ir.Static(maxLen, d), pos)
	}
	h := pe
	if t < maxLen {
		h = m.op(pos, "slice", ir.Attrs{Axes: []int{0}, Ints: []int{0, t}}, pe)
	}
	return m.dropout(pos, m.op(pos, "add", ir.Attrs{}, x, h), p)
}

// dropout is Dropout at pos.
func (m *Model) dropout(pos ir.Pos, x *Tensor, p float64) *Tensor {
	if p == 0 || m.err != nil {
		return x
	}
	if !(p >= 0 && p < 1) { // NaN too
		m.fail(pos, "dropout", "p must be in [0, 1), got %g", p)
		return x
	}
	m.stream++
	return m.op(pos, "dropout", ir.Attrs{F: p, I: m.stream}, x)
}

// Embed gathers rows of the weight w [vocab, dim] by i32 ids, as
// Embedding does with a weight of its own: for a weight shared with an
// output projection (weight tying, logits = h·wᵀ).
func Embed(w, ids *Tensor) *Tensor {
	if zero(w) || zero(ids) {
		return nil
	}
	if w.v != nil && w.v.Role == ir.Param && w.v.Attrs.Str == "param" {
		w.v.Attrs.Str = "embedding.weight" // a table Embed reads is an embedding, for optimizer groups' Kinds
	}
	return w.m.op(callerPos(), "embedding", ir.Attrs{}, w, ids)
}
