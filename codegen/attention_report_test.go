package codegen

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// attentionBytes is the global memory traffic the report models for the
// attention core of one training step of causal self-attention over T
// positions: the kernels whose ops include attention, softmax or the
// batched GEMMs over heads (rank-4 results, the unfused plan's scores).
func attentionBytes(t *testing.T, seqLen int, fuse bool) int64 {
	t.Helper()
	b := irtest.New()
	const e, heads = 32, 2
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(seqLen), ir.D(e))
	p := func(name string, s ...int) *ir.Value { return b.Param(name, ir.F32, 0.1, s...) }
	out := ops.MultiheadAttention(b.Builder, x, x, x, p("in_proj_weight", 3*e, e), p("in_proj_bias", 3*e),
		p("out_proj.weight", e, e), p("out_proj.bias", e), ops.MHAOptions{Heads: heads, Causal: true})
	m := b.Model("attn", b.Op("mean", ir.Attrs{}, out), out, ir.Optimizer{Kind: "sgd", LR: 0.1})
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	prog, err := compiler.Compile(m, compiler.Options{Fuse: fuse, RefBatch: 4})
	if err != nil {
		t.Fatal(err)
	}
	r, err := MakeReport(prog)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range r.Steps {
		if strings.Contains(s.Ops, "attention") || strings.Contains(s.Ops, "softmax") {
			n += s.Bytes
		}
	}
	if n == 0 {
		t.Fatalf("T=%d fuse=%v: no attention kernel in the report", seqLen, fuse)
	}
	return n
}

// TestAttentionBytesLinear: the fused attention's modeled global bytes
// double when T doubles (it stores the output and the log-sum-exp, never
// the T×T scores), while the unfused plan's softmax over the scores
// quadruples.
func TestAttentionBytesLinear(t *testing.T) {
	f1, f2 := attentionBytes(t, 64, true), attentionBytes(t, 128, true)
	if r := float64(f2) / float64(f1); r < 1.9 || r > 2.1 {
		t.Errorf("fused attention bytes %d at T=64, %d at T=128: ratio %.2f, want 2 (linear)", f1, f2, r)
	}
	u1, u2 := attentionBytes(t, 64, false), attentionBytes(t, 128, false)
	if r := float64(u2) / float64(u1); r < 3.8 {
		t.Errorf("unfused softmax bytes %d at T=64, %d at T=128: ratio %.2f, want 4 (quadratic)", u1, u2, r)
	}
	t.Logf("attention bytes per step at batch 4: fused %d (T=64), %d (T=128); unfused softmax %d, %d", f1, f2, u1, u2)
}
