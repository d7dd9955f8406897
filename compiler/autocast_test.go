package compiler

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
)

func withPrecision(m *ir.Model, h ir.DType) *ir.Model {
	m.Precision = &ir.Precision{Type: h, Pos: ir.Pos{File: "model.go", Line: 3}}
	return m
}

// TestAutocast checks the dtypes autocast gives the MLP, in the form the
// dump prints them, and that what the caller sees stays f32: the same
// policy in bf16 and f16.
func TestAutocast(t *testing.T) {
	for _, h := range []ir.DType{ir.BF16, ir.F16} {
		t.Run(h.String(), func(t *testing.T) { testAutocast(t, h) })
	}
}

func testAutocast(t *testing.T, h ir.DType) {
	m := withPrecision(irtest.MLP(ir.F32, 8, 6, 3, 0, ir.Optimizer{Kind: "sgd", LR: 0.1}), h)
	before := m.Forward.Print()
	p := &Program{Model: m}
	if err := autocast(p); err != nil {
		t.Fatal(err)
	}
	if m.Forward.Print() != before {
		t.Errorf("autocast changed the declared model")
	}
	var got []string
	for _, v := range p.Model.Forward.Values {
		if v.Op != "input" && v.Op != "param" {
			got = append(got, v.Op+" "+v.Type())
		}
	}
	want := []string{
		"cast bf16[B,8]", "cast bf16[6,8]", "matmul bf16[B,6]", // fc1: x and W in bf16
		"cast bf16[6]", "add bf16[B,6]", // its bias, cast like addmm's
		"relu bf16[B,6]", // a promote op on bf16 stays bf16
		"cast bf16[3,6]", "matmul bf16[B,3]", "cast bf16[3]", "add bf16[B,3]",
		"cast f32[B,3]", "cross_entropy f32[]", // cross-entropy on autocast's f32 list
	}
	for i := range want {
		want[i] = strings.ReplaceAll(want[i], "bf16", h.String())
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("after autocast:\n got %s\nwant %s", strings.Join(got, "; "), strings.Join(want, "; "))
	}
	if p.Model.Output.DType != ir.F32 || p.Model.Loss.DType != ir.F32 {
		t.Errorf("output %s, loss %s: want f32", p.Model.Output.Type(), p.Model.Loss.Type())
	}

	// Through autodiff: the gradients of the f32 master weights are f32,
	// and the backward GEMMs run in bf16.
	prog, err := Compile(m, Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	for name, g := range prog.Step.Grads {
		if g.DType != ir.F32 {
			t.Errorf("grad %s is %s, want f32", name, g.Type())
		}
	}
	gemms := 0
	for _, v := range prog.Step.Values {
		if v.Op == "matmul" {
			gemms++
			if v.DType != h && !wgradF32(v) {
				t.Errorf("%s: want a %s GEMM", v.LongString(), h)
			}
		}
	}
	if gemms != 5 { // 2 forward, 3 backward (no input gradient)
		t.Errorf("%d GEMMs, want 5", gemms)
	}
}

// TestAutocastPromotes: an elementwise op of a bf16 value and an f32 one
// that is not a GEMM's bias computes in f32 (PyTorch's promotion), while
// constants take the bf16 operand's type.
func TestAutocastPromotes(t *testing.T) {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(4))
	z := b.Input("z", ir.F32, ir.S("B"), ir.D(3))
	y := b.Input("y", ir.I32, ir.S("B"))
	h := b.Linear("fc", x, 3)
	s := b.Op("scale", ir.Attrs{F: 2}, h) // bf16
	mix := b.Binary("mul", s, z)
	m := withPrecision(b.Model("promote", b.Binary("cross_entropy", mix, y), mix, ir.Optimizer{Kind: "sgd", LR: 0.1}), ir.BF16)
	p := &Program{Model: m}
	if err := autocast(p); err != nil {
		t.Fatal(err)
	}
	for _, v := range p.Model.Forward.Values {
		switch v.Op {
		case "scale":
			if v.DType != ir.BF16 {
				t.Errorf("%s: want bf16", v.LongString())
			}
		case "mul":
			if v.DType != ir.F32 || v.Args[0].Op != "cast" || v.Args[0].DType != ir.F32 {
				t.Errorf("%s: want f32 of the widened bf16 operand", v.LongString())
			}
		}
	}
}

// TestAutocastErrors: what the pass does not cover is an error naming the
// op and its line, or the Precision call.
func TestAutocastErrors(t *testing.T) {
	f32 := withPrecision(irtest.MLP(ir.F32, 8, 6, 3, 0, irtest.Adam), ir.F32)
	if err := autocast(&Program{Model: f32}); err == nil || !strings.Contains(err.Error(), "precision (model.go:3): mixed precision in f32: want bf16 or f16") {
		t.Errorf("f32: %v", err)
	}
	f64 := withPrecision(irtest.MLP(ir.F64, 8, 6, 3, 0, irtest.Adam), ir.BF16)
	if err := autocast(&Program{Model: f64}); err == nil || !strings.Contains(err.Error(), "needs an f32 model") {
		t.Errorf("f64 model: %v", err)
	}
	// A convolution in f64 cannot be autocast: the error names the
	// convolution's line rather than the model's first f64 value.
	b := irtest.New()
	x := b.Input("x", ir.F64, ir.S("B"), ir.D(1), ir.D(6), ir.D(6))
	w := b.Param("w", ir.F64, 0.1, 2, 1, 3, 3)
	b.Pos = ir.Pos{File: "model.go", Line: 7}
	conv := ops.Conv2d(b.Builder, x, w, nil, ops.Window{KH: 3, KW: 3, SH: 1, SW: 1, DH: 1, DW: 1, G: 1})
	loss := b.Op("sum", ir.Attrs{}, conv)
	m := withPrecision(b.Model("conv", loss, conv, ir.Optimizer{Kind: "sgd", LR: 0.1}), ir.BF16)
	if err := autocast(&Program{Model: m}); err == nil || !strings.Contains(err.Error(), "conv2d (model.go:7): mixed precision (bf16, set at model.go:3) needs an f32 convolution, its input is f64[B,1,6,6]") {
		t.Errorf("f64 convolution: %v", err)
	}
}

// TestAutocastLossScale: under dynamic loss scaling the loss's gradient
// is the run-time scalar loss_scale (a kernel's result, which
// cross-entropy's gradient reads from memory), the update multiplies the
// flat gradient by the run-time inv_scale before anything else, and the
// plan carries the scaler; without one the seed is the constant 1.
func TestAutocastLossScale(t *testing.T) {
	sc := &ir.LossScaler{Init: 65536, Growth: 2, Backoff: 0.5, Interval: 2000}
	for _, c := range []struct {
		h  ir.DType
		sc *ir.LossScaler
	}{{ir.F16, sc}, {ir.BF16, sc}, {ir.BF16, nil}} {
		m := withPrecision(irtest.MLP(ir.F32, 8, 6, 3, 0, ir.Optimizer{Kind: "sgd", LR: 0.1, ClipValue: 1}), c.h)
		m.Precision.Scaler = c.sc
		prog, err := Compile(m, Options{Fuse: false})
		if err != nil {
			t.Fatal(err)
		}
		var seeds, unscales []*ir.Value
		for _, v := range prog.Step.Values {
			for _, a := range v.Args {
				if a.Role != ir.Scalar {
					continue
				}
				switch a.Name {
				case "loss_scale":
					seeds = append(seeds, v)
				case "inv_scale":
					unscales = append(unscales, v)
				}
			}
		}
		name := fmt.Sprintf("%s scaler=%v", c.h, c.sc != nil)
		if c.sc == nil {
			if len(seeds)+len(unscales) != 0 || prog.Plan.Optimizer.Scaler != nil {
				t.Errorf("%s: loss scaling without a scaler: %v %v", name, seeds, unscales)
			}
			continue
		}
		if len(seeds) != 1 || seeds[0].Op != "copy" {
			t.Errorf("%s: the seed: %v, want one copy of loss_scale", name, seeds)
		}
		// The unscale comes first: clip-by-value reads its result.
		if len(unscales) != 1 || unscales[0].Op != "mul" || unscales[0].Phase != "opt" || unscales[0].Args[0].Op != "flat" {
			t.Errorf("%s: the unscale: %v, want one mul of the flat gradient in the update", name, unscales)
		} else {
			clamped := false
			for _, v := range prog.Step.Values {
				clamped = clamped || v.Op == "clampc" && v.Args[0] == unscales[0]
			}
			if !clamped {
				t.Errorf("%s: clip_grad_value_ does not read the unscaled gradient", name)
			}
		}
		if got := prog.Plan.Optimizer.Scaler; got == nil || got.InitScale != 65536 || got.GrowthFactor != 2 || got.BackoffFactor != 0.5 || got.GrowthInterval != 2000 {
			t.Errorf("%s: the plan's scaler is %+v", name, got)
		}
	}
}

// TestAutocastRecurrent: under mixed precision a recurrence runs in f32
// with its input projection, as torch.autocast runs nn.LSTM on the CPU: a
// Linear before the LSTM is a half GEMM whose result the LSTM widens, the
// LSTM's input GEMM, bias adds and scan are f32, and the Linear after it
// is a half GEMM again. The program compiles, fused and unfused, with
// every backward GEMM of the recurrence f32 too.
func TestAutocastRecurrent(t *testing.T) {
	for _, h := range []ir.DType{ir.BF16, ir.F16} {
		build := func() *ir.Model {
			b := irtest.New()
			x := b.Input("x", ir.F32, ir.S("B"), ir.D(5), ir.D(4))
			y := b.Input("y", ir.I32, ir.S("B"))
			pre := b.Linear("pre", x, 6)
			k := 0.3
			p := func(n string, s ...int) *ir.Value { return b.Param("lstm."+n, ir.F32, k, s...) }
			_, hn, _ := ops.Recurrent(b.Builder, "lstm", pre, p("weight_ih", 4*7, 6), p("weight_hh", 4*7, 7), p("bias_ih", 4*7), p("bias_hh", 4*7), nil, nil)
			logits := b.Linear("out", hn, 3)
			return withPrecision(b.Model("lstm_amp", b.Binary("cross_entropy", logits, y), logits, irtest.Adam), h)
		}
		p := &Program{Model: build()}
		if err := autocast(p); err != nil {
			t.Fatalf("%s: %v", h, err)
		}
		scans, gemms := 0, map[ir.DType]int{}
		for _, v := range p.Model.Forward.Values {
			switch v.Op {
			case "rnn_scan":
				scans++
				if v.DType != ir.F32 {
					t.Errorf("%s: rnn_scan is %s", h, v.DType)
				}
				for i, a := range v.Args {
					if a.DType.IsFloat() && a.DType != ir.F32 {
						t.Errorf("%s: rnn_scan's argument %d is %s", h, i, a.DType)
					}
				}
				xp := v.Args[0]
				for xp.Op == "add" {
					xp = xp.Args[0]
				}
				if xp.Op != "matmul" || xp.DType != ir.F32 || xp.Args[0].Op != "cast" || xp.Args[0].Args[0].DType != h {
					t.Errorf("%s: the input projection is %s %s of %s, want an f32 matmul of the widened %s Linear", h, xp.Op, xp.DType, xp.Args[0].Op, h)
				}
			case "matmul":
				gemms[v.DType]++
			}
		}
		// pre and out in h; the LSTM's input projection in f32.
		if scans != 1 || gemms[h] != 2 || gemms[ir.F32] != 1 {
			t.Errorf("%s: %d scans, GEMMs by type %v; want 1 scan, 2 %s and 1 f32", h, scans, gemms, h)
		}
		for _, fuse := range []bool{true, false} {
			prog, err := Compile(build(), Options{Fuse: fuse})
			if err != nil {
				t.Fatalf("%s fuse=%v: %v", h, fuse, err)
			}
			half := 0
			for _, v := range prog.Funcs()[0].Values {
				if v.Op == "matmul" && v.DType == h {
					half++
				}
			}
			if half == 0 {
				t.Errorf("%s fuse=%v: no half GEMM left in the compiled step", h, fuse)
			}
		}
	}
}
