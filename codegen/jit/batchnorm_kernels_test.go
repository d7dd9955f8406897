package jit

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// convBNReLU declares conv(3→c, 3×3, pad 1) → BatchNorm2d → ReLU on a
// B×3×h×w input, with loss sum(y²·g) and SGD.
func convBNReLU(dt ir.DType, c, h, w int) *ir.Model {
	b := irtest.New()
	x := b.Input("x", dt, ir.S("B"), ir.D(3), ir.D(h), ir.D(w))
	wt := b.Param("conv.weight", dt, 0.3, c, 3, 3, 3)
	bias := b.Param("conv.bias", dt, 0.3, c)
	gamma := b.Source("param", ir.Param, "bn.weight", dt, ir.Static(c), "const:1")
	beta := b.Source("param", ir.Param, "bn.bias", dt, ir.Static(c), "const:0")
	rm := b.Source("state", ir.State, "bn.running_mean", dt, ir.Static(c), "const:0")
	rv := b.Source("state", ir.State, "bn.running_var", dt, ir.Static(c), "const:1")
	conv := ops.Conv2d(b.Builder, x, wt, bias, ops.Window{KH: 3, KW: 3, SH: 1, SW: 1, PH: 1, PW: 1, DH: 1, DW: 1, G: 1})
	y, nm, nv := ops.BatchNorm2d(b.Builder, conv, gamma, beta, rm, rv, 0.1, 1e-5)
	y = b.Unary("relu", y)
	b.F.Updates = append(b.F.Updates, ir.Update{State: rm, New: nm}, ir.Update{State: rv, New: nv})
	g := b.Input("g", dt, y.Shape...) // an input: no gradient of its own to count
	// The loss squares y so that dy depends on the forward pass, as in a
	// real network.
	loss := b.Op("sum", ir.Attrs{}, b.Binary("mul", b.Unary("square", y), g))
	return b.Model("convbn", loss, y, ir.Optimizer{Kind: "sgd", LR: 0.1})
}

// TestBatchNormKernelCount pins the passes over memory of conv → BN → ReLU
// when fused: forward one statistics pass (sum of d and d², with the conv
// bias and the shift as prologue), one small per-channel kernel (mean,
// variance, scale, shift, running statistics) and one normalise+ReLU pass;
// backward one pass for both sums (dy and dy·d, with the ReLU backward as
// prologue), one per-channel kernel and one pass for dx (which the conv
// bias gradient's reduction absorbs).
func TestBatchNormKernelCount(t *testing.T) {
	p, err := compiler.Compile(convBNReLU(ir.F32, 4, 5, 6), compiler.Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	type count struct{ big, small int }
	var fwd, bwd count
	space := ir.Shape{ir.S("B"), ir.D(4), ir.D(5), ir.D(6)}
	for _, g := range p.Groups[p.Step] {
		t.Logf("%s", g)
		if g.Kind == compiler.Gemm || strings.Contains(g.Name, "im2col") || strings.Contains(g.Name, "col2im") || strings.Contains(g.Name, "optimizer") {
			continue
		}
		phase := &fwd
		if g.Values[0].Phase == "bwd" {
			phase = &bwd
		}
		switch {
		case g.Space.Eq(space):
			phase.big++
		case g.Space.Size().N == 4 && len(g.Space.Size().Syms) == 0:
			phase.small++
		}
	}
	if fwd != (count{2, 1}) || bwd != (count{2, 1}) {
		t.Errorf("BN kernels over N×C×H×W / per channel: forward %d/%d, backward %d/%d; want 2/1 each", fwd.big, fwd.small, bwd.big, bwd.small)
	}
}
