package dsl

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// TestTransformerNames: torch.nn.Transformer's state_dict names, shapes
// and count (2 encoder and 1 decoder layer, d_model 12, ff 20).
func TestTransformerNames(t *testing.T) {
	m := NewModel("tf")
	src := m.Input("src", F32, Batch, 5, 12)
	tgt := m.Input("tgt", F32, Batch, 7, 12)
	out := m.Transformer("", src, tgt, 3, 2, 1, TransformerOptions{DimFeedforward: 20})
	m.Output(out)
	m.Loss(Sum(out, false))
	m.Optimizer(Adam{LR: 1e-3})
	im, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, v := range im.Forward.Values {
		if v.Role == ir.Param {
			got[v.Name] = v.Shape.String()
		}
	}
	// 2 encoder layers × 12 tensors + 2 (encoder.norm) + 1 decoder layer
	// × 18 + 2 (decoder.norm), as len(nn.Transformer(...).state_dict()).
	if len(got) != 2*12+2+18+2 {
		t.Errorf("%d parameters, want 46", len(got))
	}
	for name, shape := range map[string]string{
		"encoder.layers.1.self_attn.in_proj_weight":     "[36,12]",
		"encoder.layers.0.linear1.weight":               "[20,12]",
		"encoder.norm.bias":                             "[12]",
		"decoder.layers.0.multihead_attn.in_proj_bias":  "[36]",
		"decoder.layers.0.multihead_attn.out_proj.bias": "[12]",
		"decoder.layers.0.norm3.weight":                 "[12]",
		"decoder.norm.weight":                           "[12]",
	} {
		if got[name] != shape {
			t.Errorf("%s: %q, want %s", name, got[name], shape)
		}
	}
}

// TestAttentionMaskErrors: a key-padding mask of the wrong shape names
// the op and the caller's line, at declaration.
func TestAttentionMaskErrors(t *testing.T) {
	m := NewModel("bad")
	x := m.Input("x", F32, Batch, 7, 12)
	kpm := m.Tokens("kpm", Batch, 5) // keys are 7 long
	_, _, line, _ := runtime.Caller(0)
	m.MultiheadAttention("attn", x, x, x, 3, Attention{KeyPadding: kpm})
	err := m.Err()
	want := fmt.Sprintf("multihead_attention (dsl/transformer_test.go:%d)", line+1)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "key padding mask i32[B,5], want i32[B,7]") {
		t.Errorf("error %v, want %s ... key padding mask i32[B,5], want i32[B,7]", err, want)
	}
	m = NewModel("bad2")
	x = m.Input("x", F32, Batch, 7, 12)
	m.MultiheadAttention("attn", x, x, x, 5)
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), "not divisible by 5 heads") {
		t.Errorf("12 features over 5 heads: error %v", err)
	}
}

// TestMaskedSoftmax: the masks reach the op, and a padding mask of the
// wrong shape names the op and the caller's line.
func TestMaskedSoftmax(t *testing.T) {
	m := NewModel("sm")
	x := m.Input("x", F32, Batch, 2, 6, 6)
	kpm := m.Tokens("kpm", Batch, 6)
	y := MaskedSoftmax(x, true, kpm)
	if m.Err() != nil || y.v.Op != "softmax" || y.v.Attrs.Str != "causal" || len(y.v.Args) != 2 {
		t.Fatalf("masked softmax %v: %v", y.v.LongString(), m.Err())
	}
	bad := m.Tokens("bad", Batch, 5)
	_, _, line, _ := runtime.Caller(0)
	MaskedSoftmax(x, false, bad)
	want := fmt.Sprintf("softmax (dsl/transformer_test.go:%d)", line+1)
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %s", err, want)
	}
}
