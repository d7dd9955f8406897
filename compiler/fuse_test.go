package compiler

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ops"
)

func TestFuseMLP(t *testing.T) {
	p := through(t, testMLP(6, 5, 3, 0.2, adam), "fuse", true)
	gs := p.Groups[p.Step]
	names := map[string]*Group{}
	kinds := map[GroupKind]int{}
	for _, g := range gs {
		names[g.Name] = g
		kinds[g.Kind]++
	}
	for _, want := range []string{"fc1_bias_relu_dropout_fwd", "optimizer_update"} {
		if names[want] == nil {
			t.Errorf("no kernel %s (have %v)", want, keys(names))
		}
	}
	// One multi-tensor optimizer kernel over the flat parameter vector.
	if g := names["optimizer_update"]; g != nil && (g.Kind != EW || len(g.Outputs) != 3) {
		t.Errorf("optimizer kernel %s: want one elementwise kernel writing params, m and v", g)
	}
	// Cross-entropy fused with its gradient.
	ce := 0
	for _, g := range gs {
		if g.Kind == CE {
			ce++
			if g.Loss == nil || g.Grad == nil {
				t.Errorf("cross-entropy kernel %s lacks the loss or the gradient", g)
			}
		}
	}
	if ce != 1 {
		t.Errorf("%d cross-entropy kernels, want 1", ce)
	}
	// Activation backward fused with the bias-gradient reduction.
	if kinds[Reduce] == 0 || !strings.Contains(strings.Join(keys(names), " "), "relu_bwd_sum_bwd") {
		t.Errorf("no relu backward + bias gradient kernel: %v", keys(names))
	}
	if kinds[Gemm] != 5 {
		t.Errorf("%d GEMMs, want 5 (2 forward; 3 backward, with no dX for the input)", kinds[Gemm])
	}
}

func TestFuseOff(t *testing.T) {
	p := through(t, testMLP(6, 5, 3, 0.2, adam), "fuse", false)
	for _, f := range p.Funcs() {
		computed := 0
		for _, v := range f.Values {
			if d := ops.Lookup(v.Op); d.Kind != ops.Source && d.Kind != ops.View && !isConst(v) {
				computed++
			}
		}
		if got := len(p.Groups[f]); got != computed {
			t.Errorf("%s: %d kernels for %d primitive ops", f.Name, got, computed)
		}
	}
}

func keys(m map[string]*Group) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
