package dsl

import (
	"fmt"
	"math"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// TransformerOptions are the layer options of torch.nn.Transformer and its
// layers. The zero value means dim_feedforward 2048, ReLU, post-LN,
// eps 1e-5 and no dropout; TransformerDefaults adds PyTorch's dropout 0.1.
type TransformerOptions struct {
	DimFeedforward int
	Dropout        float64
	Activation     string // "relu" (default) or "gelu"
	NormFirst      bool   // pre-LN: x + f(norm(x)) instead of norm(x + f(x))
	LayerNormEps   float64
}

// TransformerDefaults are torch.nn.Transformer's defaults: dim_feedforward
// 2048, dropout 0.1, ReLU, post-LN, eps 1e-5.
func TransformerDefaults() TransformerOptions {
	return TransformerOptions{DimFeedforward: 2048, Dropout: 0.1, Activation: "relu", LayerNormEps: 1e-5}
}

func (o TransformerOptions) norm() TransformerOptions {
	if o.DimFeedforward == 0 {
		o.DimFeedforward = 2048
	}
	if o.Activation == "" {
		o.Activation = "relu"
	}
	if o.LayerNormEps == 0 {
		o.LayerNormEps = 1e-5
	}
	return o
}

// Masks are the masks of torch.nn.Transformer's forward: the causal
// src_mask and tgt_mask (generate_square_subsequent_mask; other attention
// masks are not supported) and the i32 key-padding masks [B, T], non-zero
// where a position is padding.
type Masks struct {
	SrcCausal, TgtCausal                           bool
	SrcKeyPadding, TgtKeyPadding, MemoryKeyPadding *Tensor
}

// masks is the one Masks value a layer takes. An encoder layer reads the
// Src fields, a decoder layer the Tgt and Memory ones; a field the layer
// does not read (a TgtCausal given to an encoder layer) used to be dropped
// without a word.
func (m *Model) masks(pos ir.Pos, op string, ms []Masks, src, tgt bool) (Masks, bool) {
	mk, ok := single(m, pos, op, ms)
	switch {
	case !ok:
	case !src && (mk.SrcCausal || mk.SrcKeyPadding != nil):
		m.fail(pos, op, "SrcCausal and SrcKeyPadding mask an encoder's attention; a decoder layer reads TgtCausal, TgtKeyPadding and MemoryKeyPadding")
		ok = false
	case !tgt && (mk.TgtCausal || mk.TgtKeyPadding != nil || mk.MemoryKeyPadding != nil):
		m.fail(pos, op, "TgtCausal, TgtKeyPadding and MemoryKeyPadding mask a decoder's attention; an encoder layer reads SrcCausal and SrcKeyPadding")
		ok = false
	}
	return mk, ok
}

// feedForward is linear2(dropout(act(linear1(x)))).
func (m *Model) feedForward(pos ir.Pos, name string, x *Tensor, o TransformerOptions) *Tensor {
	e := x.v.Shape[len(x.v.Shape)-1].N
	h := m.linear(name+".linear1", x, o.DimFeedforward, true, pos)
	switch o.Activation {
	case "relu":
		h = m.op(pos, "relu", ir.Attrs{}, h)
	case "gelu":
		h = m.op(pos, "gelu", ir.Attrs{}, h)
	default:
		m.fail(pos, "transformer", "%s: activation %q (want relu or gelu)", name, o.Activation)
		return x
	}
	return m.linear(name+".linear2", m.dropout(pos, h, o.Dropout), e, true, pos)
}

// sublayer is norm(x + dropout(f(x))) post-LN, x + dropout(f(norm(x)))
// pre-LN.
func (m *Model) sublayer(pos ir.Pos, norm string, x *Tensor, o TransformerOptions, f func(*Tensor) *Tensor) *Tensor {
	if o.NormFirst {
		return m.op(pos, "add", ir.Attrs{}, x, m.dropout(pos, f(m.layerNorm(pos, norm, x, o.LayerNormEps)), o.Dropout))
	}
	return m.layerNorm(pos, norm, m.op(pos, "add", ir.Attrs{}, x, m.dropout(pos, f(x), o.Dropout)), o.LayerNormEps)
}

func (m *Model) checkModel(pos ir.Pos, op string, ts ...*Tensor) bool {
	for _, t := range ts {
		if t != nil && t.m != m {
			if zero(t) {
				m.fail(pos, op, "a tensor is nil or a zero dsl.Tensor")
				return false
			}
			m.fail(pos, op, "a tensor belongs to another model")
			return false
		}
	}
	return m.err == nil
}

// TransformerEncoderLayer is torch.nn.TransformerEncoderLayer(E, heads,
// dim_feedforward, dropout, activation, batch_first=True, norm_first) on
// src [B, T, E]: parameters name.self_attn.*, name.linear1, name.linear2,
// name.norm1, name.norm2 as PyTorch names them. Masks' SrcCausal and
// SrcKeyPadding apply.
func (m *Model) TransformerEncoderLayer(name string, src *Tensor, heads int, o TransformerOptions, masks ...Masks) *Tensor {
	pos := callerPos()
	mk, ok := m.masks(pos, "transformer_encoder_layer", masks, true, false)
	if !ok {
		return m.errTensor(src)
	}
	return m.encoderLayer(pos, name, src, heads, o.norm(), mk)
}

func (m *Model) encoderLayer(pos ir.Pos, name string, x *Tensor, heads int, o TransformerOptions, mk Masks) *Tensor {
	if m.err != nil || m.isNil(pos, "transformer_encoder_layer", name, "the input", x) || !m.checkModel(pos, "transformer_encoder_layer", x, mk.SrcKeyPadding) {
		return m.errTensor(x)
	}
	att := Attention{Causal: mk.SrcCausal, KeyPadding: mk.SrcKeyPadding, Dropout: o.Dropout}
	x = m.sublayer(pos, name+".norm1", x, o, func(h *Tensor) *Tensor { return m.mha(pos, name+".self_attn", h, h, h, heads, att) })
	return m.sublayer(pos, name+".norm2", x, o, func(h *Tensor) *Tensor { return m.feedForward(pos, name, h, o) })
}

// TransformerDecoderLayer is torch.nn.TransformerDecoderLayer(E, heads,
// dim_feedforward, dropout, activation, batch_first=True, norm_first) on
// tgt [B, Tt, E] and memory [B, Ts, E]: name.self_attn.*,
// name.multihead_attn.*, name.linear1, name.linear2, name.norm1..3.
// Masks' TgtCausal, TgtKeyPadding and MemoryKeyPadding apply.
func (m *Model) TransformerDecoderLayer(name string, tgt, memory *Tensor, heads int, o TransformerOptions, masks ...Masks) *Tensor {
	pos := callerPos()
	mk, ok := m.masks(pos, "transformer_decoder_layer", masks, false, true)
	if !ok {
		return m.errTensor(tgt)
	}
	return m.decoderLayer(pos, name, tgt, memory, heads, o.norm(), mk)
}

func (m *Model) decoderLayer(pos ir.Pos, name string, x, mem *Tensor, heads int, o TransformerOptions, mk Masks) *Tensor {
	if m.err != nil || m.isNil(pos, "transformer_decoder_layer", name, "tgt", x) || m.isNil(pos, "transformer_decoder_layer", name, "memory", mem) || !m.checkModel(pos, "transformer_decoder_layer", x, mem, mk.TgtKeyPadding, mk.MemoryKeyPadding) {
		return m.errTensor(x)
	}
	self := Attention{Causal: mk.TgtCausal, KeyPadding: mk.TgtKeyPadding, Dropout: o.Dropout}
	cross := Attention{KeyPadding: mk.MemoryKeyPadding, Dropout: o.Dropout}
	x = m.sublayer(pos, name+".norm1", x, o, func(h *Tensor) *Tensor { return m.mha(pos, name+".self_attn", h, h, h, heads, self) })
	x = m.sublayer(pos, name+".norm2", x, o, func(h *Tensor) *Tensor { return m.mha(pos, name+".multihead_attn", h, mem, mem, heads, cross) })
	return m.sublayer(pos, name+".norm3", x, o, func(h *Tensor) *Tensor { return m.feedForward(pos, name, h, o) })
}

// Transformer is torch.nn.Transformer(E, heads, encLayers, decLayers,
// dim_feedforward, dropout, activation, batch_first=True, norm_first) on
// src [B, Ts, E] and tgt [B, Tt, E]: encoder layers name.encoder.layers.i,
// the encoder's final name.encoder.norm, decoder layers
// name.decoder.layers.i and name.decoder.norm, every matrix initialised
// xavier-uniform as PyTorch's _reset_parameters does. It returns the
// decoder's output [B, Tt, E].
func (m *Model) Transformer(name string, src, tgt *Tensor, heads, encLayers, decLayers int, o TransformerOptions, masks ...Masks) *Tensor {
	pos := callerPos()
	o = o.norm()
	mk, ok := m.masks(pos, "transformer", masks, true, true)
	if !ok || m.isNil(pos, "transformer", name, "src", src) || m.isNil(pos, "transformer", name, "tgt", tgt) || !m.checkModel(pos, "transformer", src, tgt) {
		return m.errTensor(tgt)
	}
	if encLayers < 1 || decLayers < 1 {
		m.fail(pos, "transformer", "%s: %d encoder and %d decoder layers, want at least 1 each", name, encLayers, decLayers)
		return tgt
	}
	prefix := name
	if prefix != "" {
		prefix += "."
	}
	first := len(m.m.Forward.Values)
	mem := src
	for i := 0; i < encLayers; i++ {
		mem = m.encoderLayer(pos, fmt.Sprintf("%sencoder.layers.%d", prefix, i), mem, heads, o, mk)
	}
	mem = m.layerNorm(pos, prefix+"encoder.norm", mem, o.LayerNormEps)
	y := tgt
	for i := 0; i < decLayers; i++ {
		y = m.decoderLayer(pos, fmt.Sprintf("%sdecoder.layers.%d", prefix, i), y, mem, heads, o, mk)
	}
	y = m.layerNorm(pos, prefix+"decoder.norm", y, o.LayerNormEps)
	if m.err != nil {
		return y
	}
	for _, v := range m.m.Forward.Values[first:] {
		if v.Role == ir.Param && len(v.Shape) > 1 && strings.HasPrefix(v.Name, prefix) {
			fanOut, fanIn := v.Shape[0].N, v.Shape[1].N
			a := math.Sqrt(6 / float64(fanIn+fanOut))
			v.Attrs.Init = Uniform(-a, a).String()
		}
	}
	return y
}

// DecoderOnlyBlock is one block of a GPT-style causal language model:
// pre-LN, GELU, causal self-attention; that is
// torch.nn.TransformerEncoderLayer(E, heads, dim_feedforward, dropout,
// activation="gelu", batch_first=True, norm_first=True) with a causal
// src_mask, and its parameter names.
func (m *Model) DecoderOnlyBlock(name string, x *Tensor, heads, dimFeedforward int, dropout float64) *Tensor {
	o := TransformerOptions{DimFeedforward: dimFeedforward, Dropout: dropout, Activation: "gelu", NormFirst: true}.norm()
	return m.encoderLayer(callerPos(), name, x, heads, o, Masks{SrcCausal: true})
}
