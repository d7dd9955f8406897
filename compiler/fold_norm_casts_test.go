package compiler

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/transformer"
)

// TestFoldNormCasts: in the gpt under mixed precision (pre-LN: each
// LayerNorm's output is read by one GEMM only), every layernorm of the
// training step stores the half type and every layernorm_bwd reads a
// half gradient, with no cast left on either side; Options.Off turns the
// pass off (and refuses a required pass or an unknown name).
// models/transformer's TestFoldCastsExact checks the same bits.
func TestFoldNormCasts(t *testing.T) {
	c := transformer.GPTConfig()
	c.DModel, c.Heads, c.FF, c.SeqLen, c.MaxLen, c.DecLayers = 12, 3, 20, 5, 8, 2
	for _, h := range []dsl.DType{dsl.BF16, dsl.F16} {
		m := transformer.NewGPT(c)
		m.Precision(dsl.AMP{Type: h})
		im, err := m.Build()
		if err != nil {
			t.Fatal(err)
		}
		ht := im.Precision.Type
		for _, off := range []bool{false, true} {
			opts := Options{Fuse: true}
			if off {
				opts.Off = []string{"fold_norm_casts"}
			}
			p, err := Compile(im, opts)
			if err != nil {
				t.Fatal(err)
			}
			uses := p.Step.Uses()
			norms, bwds := 0, 0
			for _, v := range p.Step.Values {
				switch v.Op {
				case "layernorm":
					norms++
					castOut := len(uses[v]) == 1 && uses[v][0].Op == "cast"
					if got := v.DType == ht && !castOut; got == off {
						t.Errorf("%s off=%v: %s read by %d values", ht, off, v.LongString(), len(uses[v]))
					}
				case "layernorm_bwd":
					bwds++
					g := v.Args[0]
					if got := g.DType == ht && g.Op != "cast"; got == off {
						t.Errorf("%s off=%v: %s reads %s", ht, off, v.LongString(), g.LongString())
					}
				}
			}
			// ln_f's output feeds the tied logits GEMM too: 2 blocks × 2 + 1.
			if norms != 5 || bwds != 5 {
				t.Errorf("%s off=%v: %d layernorms, %d layernorm_bwd; want 5 each", ht, off, norms, bwds)
			}
		}
	}
	m := transformer.NewGPT(c)
	m.Precision(dsl.AMP{Type: dsl.BF16})
	im, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	for off, want := range map[string]string{"fuse": "cannot be turned off", "fold_norms": "no such pass"} {
		if _, err := Compile(im, Options{Fuse: true, Off: []string{off}}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Off %q: err %v, want %q", off, err, want)
		}
	}
}
