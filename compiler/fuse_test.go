package compiler

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// seedMLP is models/mlp's MLP at small sizes: two hidden layers with ReLU
// and dropout, cross-entropy, Adam.
func seedMLP() *ir.Model {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(8))
	y := b.Input("y", ir.I32, ir.S("B"))
	h := b.Op("dropout", ir.Attrs{F: 0.2, I: 1}, b.Unary("relu", b.Linear("fc1", x, 6)))
	h = b.Op("dropout", ir.Attrs{F: 0.2, I: 2}, b.Unary("relu", b.Linear("fc2", h, 5)))
	logits := b.Linear("fc3", h, 3)
	return b.Model("mlp", b.Binary("cross_entropy", logits, y), logits, adam)
}

// kernels describes each group as "kind name: ops", in launch order, with
// the optimizer update abbreviated (TestFuseOptimizer checks it).
func kernels(gs []*Group) []string {
	var out []string
	for _, g := range gs {
		o := g.Ops()
		if g.Name == "optimizer_update" {
			o = "..."
		}
		out = append(out, fmt.Sprintf("%s %s: %s", g.Kind, g.Name, o))
	}
	return out
}

// TestFuseMLP pins the seed MLP's kernels: what generated/mlp launches
// (17 step kernels, 8 of them GEMMs; 6 predict kernels).
func TestFuseMLP(t *testing.T) {
	p := through(t, seedMLP(), "fuse", true)
	for _, tc := range []struct {
		f    *ir.Func
		want []string
	}{
		{p.Step, []string{
			"gemm fc1_matmul_fwd: matmul",
			// GEMM epilogue: bias, activation and dropout in one kernel.
			"ew fc1_bias_relu_dropout_fwd: add+relu+dropout",
			"gemm fc2_matmul_fwd: matmul",
			"ew fc2_bias_relu_dropout_fwd: add+relu+dropout",
			"gemm fc3_matmul_fwd: matmul",
			// The logits' bias, the loss and dlogits in one kernel.
			"ce fc3_bias_cross_entropy_ce_grad_bwd: add+cross_entropy+ce_grad",
			"reduce sum_bwd: sum",
			"gemm fc3_matmul_bwd: matmul",
			"gemm matmul_bwd: matmul",
			// Dropout and ReLU backward in one kernel; the bias gradient
			// sums its output (a reduction absorbs no dropout: hasDropout).
			"ew dropout_relu_bwd_bwd: dropout+relu_bwd",
			"reduce sum_bwd_2: sum",
			"gemm fc2_matmul_bwd: matmul",
			"gemm matmul_bwd_2: matmul",
			"ew dropout_relu_bwd_bwd_2: dropout+relu_bwd",
			"reduce sum_bwd_3: sum",
			"gemm matmul_bwd_3: matmul",
			// One multi-tensor update over the flat parameters.
			"ew optimizer_update: ...",
		}},
		{p.Predict, []string{
			"gemm fc1_matmul_fwd: matmul",
			"ew fc1_bias_relu_dropout_fwd: add+relu+dropout",
			"gemm fc2_matmul_fwd: matmul",
			"ew fc2_bias_relu_dropout_fwd: add+relu+dropout",
			"gemm fc3_matmul_fwd: matmul",
			"ew fc3_bias_fwd: add",
		}},
	} {
		got := kernels(p.Groups[tc.f])
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s: %d kernels\n\t%s\nwant %d\n\t%s", tc.f.Name, len(got), strings.Join(got, "\n\t"), len(tc.want), strings.Join(tc.want, "\n\t"))
		}
	}
}

// TestFuseCEIgnore: with an ignore index (and label smoothing) the loss
// and dlogits still share the logits' bias kernel, the gradient carrying
// the same options.
func TestFuseCEIgnore(t *testing.T) {
	m := seedMLP()
	m.Loss.Attrs = ir.Attrs{F: 0.1, Ints: []int{-100}}
	p := through(t, m, "fuse", true)
	for _, g := range p.Groups[p.Step] {
		if g.Kind != CE {
			continue
		}
		if g.Ops() != "add+cross_entropy+ce_grad" || g.Grad == nil || g.Grad.Attrs.F != 0.1 || len(g.Grad.Attrs.Ints) != 1 || g.Grad.Attrs.Ints[0] != -100 {
			t.Fatalf("%s: %s, grad %v", g.Name, g.Ops(), g.Grad)
		}
		return
	}
	t.Fatal("no cross-entropy kernel")
}

// TestFuseGroups checks the properties each fused kernel relies on, over
// the seed MLP: an epilogue writes only what later kernels read, the
// cross-entropy kernel owns both its loss and dlogits, and the order of
// kernels is a topological order of the values.
func TestFuseGroups(t *testing.T) {
	p := through(t, seedMLP(), "fuse", true)
	gs := p.Groups[p.Step]
	owner := map[*ir.Value]int{}
	for i, g := range gs {
		for _, v := range g.Values {
			owner[v] = i
		}
	}
	for i, g := range gs {
		for _, v := range g.Values {
			for _, a := range v.Args {
				for _, s := range storageOf(a) {
					if j, ok := owner[s]; ok && j > i {
						t.Errorf("kernel %s reads %s from later kernel %s", g.Name, s, gs[j].Name)
					}
				}
			}
		}
		switch g.Kind {
		case CE:
			if g.Loss == nil || g.Grad == nil || !g.has(g.Loss) || !g.has(g.Grad) || g.Grad.Args[2].Op != "fill" {
				t.Errorf("cross-entropy kernel %s: loss %v, grad %v", g, g.Loss, g.Grad)
			}
		case Gemm:
			if len(g.Values) != 1 || g.Root.Op != "matmul" {
				t.Errorf("GEMM %s computes %s", g.Name, g.Ops())
			}
		}
	}
	// The first epilogue keeps relu's output for relu_bwd and dropout's
	// for the next GEMM, and nothing else: the bias add stays in
	// registers.
	ep := gs[1]
	if got := fmt.Sprint(opsOf(ep.Outputs)); got != "[relu dropout]" {
		t.Errorf("%s writes %s, want relu and dropout", ep.Name, got)
	}
}

// TestFuseOptimizer: the whole update over the flat parameter vector is one
// elementwise kernel writing the parameters and both Adam moments.
func TestFuseOptimizer(t *testing.T) {
	p := through(t, seedMLP(), "fuse", true)
	var opt []*Group
	for _, g := range p.Groups[p.Step] {
		for _, v := range g.Values {
			if v.Phase == "opt" {
				opt = append(opt, g)
				break
			}
		}
	}
	if len(opt) != 1 {
		t.Fatalf("the update is %d kernels: %v", len(opt), opt)
	}
	g := opt[0]
	computed := 0
	for _, v := range p.Step.Values {
		if v.Phase == "opt" && !isConst(v) && kindOf(v) == ops.Elementwise {
			computed++
		}
	}
	if g.Kind != EW || len(g.Values) != computed {
		t.Errorf("optimizer kernel %s holds %d of %d update values", g, len(g.Values), computed)
	}
	var news []*ir.Value
	for _, u := range p.Step.Updates {
		news = append(news, u.New)
	}
	if fmt.Sprint(g.Outputs) != fmt.Sprint(news) {
		t.Errorf("optimizer kernel writes %v, want the updates' new values %v", g.Outputs, news)
	}
}

// TestFuseOff: without fusion every primitive op is a kernel of its own.
func TestFuseOff(t *testing.T) {
	p := through(t, seedMLP(), "fuse", false)
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
		for _, g := range p.Groups[f] {
			if len(g.Values) != 1 {
				t.Errorf("%s: unfused kernel %s computes %s", f.Name, g.Name, g.Ops())
			}
		}
	}
}

func opsOf(vs []*ir.Value) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Op)
	}
	return out
}

// TestFusePhases: issue 27's e_ce_scalar, an unbatched model whose
// gradient has the flat parameter vector's shape. The update's first
// value had no producer to join and fused horizontally with the
// gradient's kernel, which moved the gradient past the gradient/update
// boundary ("temporary ... is alive across the gradient/update
// boundary"). Every kernel is now of one phase, and the model compiles
// fused and unfused.
func TestFusePhases(t *testing.T) {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.D(3))
	y := b.Input("y", ir.I32)
	w := b.Param("w", ir.F32, 1, 3)
	logits := b.Binary("mul", b.Op("scale", ir.Attrs{F: 1}, x), w)
	m := b.Model("e_ce_scalar", b.Binary("cross_entropy", logits, y), logits, adam)
	for _, fuse := range []bool{true, false} {
		p, err := Compile(m, Options{Fuse: fuse})
		if err != nil {
			t.Fatalf("fuse=%v: %v", fuse, err)
		}
		for _, g := range p.Groups[p.Step] {
			opt := 0
			for _, v := range g.Values {
				if v.Phase == "opt" {
					opt++
				}
			}
			if opt != 0 && opt != len(g.Values) {
				t.Errorf("fuse=%v: kernel %s mixes %d update values with %d of the gradient phase: %s", fuse, g.Name, opt, len(g.Values)-opt, g.Ops())
			}
		}
	}
}

// TestFuseHalfBatchSum: a Linear layer over [B, T, ·] activations sums
// its weight gradient over the batch. Under mixed precision that sum is
// the GEMM of 16-bit operands's own (SumBatch, one product over B·T,
// its f32 result kept: f32_weight_grads.go), fused and with fusion off
// alike, so that the two agree bit for bit; in f32 only fusion joins
// them. A convolution's weight gradient (not one larger GEMM) is
// autocast_conv_test.go's.
func TestFuseHalfBatchSum(t *testing.T) {
	model := func(dt ir.DType) *ir.Model {
		b := irtest.New()
		x := b.Input("x", ir.F32, ir.S("B"), ir.D(5), ir.D(8))
		y := b.Input("y", ir.I32, ir.S("B"), ir.D(5))
		logits := b.Linear("fc2", b.Unary("relu", b.Linear("fc1", x, 6)), 3)
		m := b.Model("seq", b.Binary("cross_entropy", logits, y), logits, adam)
		if dt != ir.F32 {
			m.Precision = &ir.Precision{Type: dt}
		}
		return m
	}
	for _, dt := range []ir.DType{ir.F32, ir.BF16, ir.F16} {
		for _, fuse := range []bool{true, false} {
			p := through(t, model(dt), "fuse", fuse)
			var summed []string
			for _, g := range p.Groups[p.Step] {
				if g.SumBatch != nil {
					if g.Kind != Gemm || !kConcat(g.Root) || g.SumBatch.Args[0] != g.Root {
						t.Errorf("%s fuse=%v: %s sums %s", dt, fuse, g.Name, g.SumBatch.LongString())
					}
					summed = append(summed, g.SumBatch.Type())
				}
			}
			want := []string{"f32[1,3,6]", "f32[1,6,8]"} // backward order
			if dt == ir.F32 && !fuse {
				want = nil
			}
			if strings.Join(summed, " ") != strings.Join(want, " ") {
				t.Errorf("%s fuse=%v: batch sums in GEMMs %v, want %v", dt, fuse, summed, want)
			}
		}
	}
}
