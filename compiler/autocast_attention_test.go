package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/transformer"
)

// TestAutocastAttention checks the dtypes autocast gives the gpt (pre-LN,
// causal, tied embedding) and the TransformerLM (post-LN, whose LayerNorms
// take the residual form fused) in bf16 and f16: the fused attention
// reads q, k and v in the half type and stores its output in it, with the
// f32 log-sum-exp in two elements per head; its backward reads and
// writes the half type; LayerNorm, softmax, cross-entropy and the
// embedding's gather read and write f32; every GEMM is half; the
// gradients of the master weights are f32. Under -fuse=none the
// attention's batched GEMMs are half and its softmax f32, and the slices
// and permutes between them keep the half type.
func TestAutocastAttention(t *testing.T) {
	small := func(c transformer.Config) transformer.Config {
		c.Vocab, c.DModel, c.Heads, c.FF, c.SeqLen, c.MaxLen, c.EncLayers, c.DecLayers = 11, 12, 3, 20, 5, 8, 1, 1
		c.Dropout = 0.1
		return c
	}
	for _, h := range []dsl.DType{dsl.BF16, dsl.F16} {
		for _, name := range []string{"gpt", "transformer"} {
			for _, fuse := range []bool{true, false} {
				m := transformer.NewGPT(small(transformer.GPTConfig()))
				if name == "transformer" {
					m = transformer.NewTransformerLM(small(transformer.LMConfig()))
				}
				m.Precision(dsl.AMP{Type: h})
				im, err := m.Build()
				if err != nil {
					t.Fatal(err)
				}
				p, err := Compile(im, Options{Fuse: fuse})
				if err != nil {
					t.Fatalf("%s %s fuse=%v: %v", name, h, fuse, err)
				}
				testAutocastAttention(t, p, im.Precision.Type, fuse)
			}
		}
	}
}

func testAutocastAttention(t *testing.T, p *Program, h ir.DType, fuse bool) {
	t.Helper()
	want := func(v *ir.Value, ok bool, what string) {
		t.Helper()
		if !ok {
			t.Errorf("%s %s fuse=%v: %s: want %s", p.Model.Name, h, fuse, v.LongString(), what)
		}
	}
	floatArgs := func(v *ir.Value, dt ir.DType) bool {
		for _, a := range v.Args {
			if a.DType.IsFloat() && a.DType != dt {
				return false
			}
		}
		return true
	}
	count := map[string]int{}
	for _, v := range p.Step.Values {
		count[v.Op]++
		switch v.Op {
		case "attention":
			q := v.Args[0]
			d, heads := v.Attrs.Ints[0]*v.Attrs.Ints[1], v.Attrs.Ints[0]
			want(v, floatArgs(v, h) && v.DType == h && v.Shape[2].N == d+2*heads,
				"half q, k, v and a half result of width H·dh + 2H")
			want(v, q.Op == "cast" || q.Op == "add", "q from the half projection")
		case "attention_bwd":
			want(v, floatArgs(v, h) && v.DType == h, "half operands and gradient")
		case "layernorm":
			// Computed in f32; fused, its output is stored in the half type
			// its only reader, a GEMM, takes (fold_norm_casts.go).
			want(v, len(v.Args) == 3, "no residual form under mixed precision (residual_norm.go)")
			want(v, floatArgs(v, ir.F32) && (v.DType == ir.F32 || fuse && v.DType == h && v.Attrs.Str == h.String()), "f32 operands (autocast's f32 list), an f32 result or, fused, a half one")
		case "layernorm_bwd":
			// Fused, it reads the half gradient of a half output.
			g := v.Args[0]
			want(v, floatArgs(&ir.Value{Args: v.Args[1:]}, ir.F32) && v.DType == ir.F32 && (g.DType == ir.F32 || fuse && g.DType == h), "f32 (autocast's f32 list), fused a half gradient")
		case "cross_entropy", "cross_entropy_bwd", "embedding":
			want(v, floatArgs(v, ir.F32) && (v.DType == ir.F32 || !v.DType.IsFloat()), "f32 (autocast's f32 list)")
		case "softmax":
			want(v, floatArgs(v, ir.F32) && v.DType == ir.F32, "an f32 softmax")
		case "matmul":
			want(v, floatArgs(v, h) && (v.DType == h || wgradF32(v)), "a half GEMM")
		case "slice", "permute", "slice_bwd":
			want(v, v.DType == ir.F32 || v.DType == h, "its operand's type")
			if v.Args[0].DType == h {
				want(v, v.DType == h, "a half result of a half operand")
			}
		}
	}
	if fuse {
		want(&ir.Value{Op: "attention"}, count["attention"] > 0 && count["attention_bwd"] > 0 && count["softmax"] == 0, "fused attention")
	} else {
		want(&ir.Value{Op: "softmax"}, count["attention"] == 0 && count["softmax"] > 0, "attention expanded")
	}
	for n, g := range p.Step.Grads {
		if g.DType != ir.F32 {
			t.Errorf("%s: grad %s is %s, want f32", p.Model.Name, n, g.Type())
		}
	}
}
