package codegen

import (
	"regexp"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// lstmModel is a 2-layer LSTM classifier over sequences of T steps.
func lstmModel(t *testing.T, T int) *ir.Model {
	t.Helper()
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(T), ir.D(5))
	y := b.Input("y", ir.I32, ir.S("B"))
	h := x
	var hn *ir.Value
	for l, in := range []int{5, 8} {
		p := func(n string, s ...int) *ir.Value { return b.Param(n+string(rune('0'+l)), ir.F32, 0.3, s...) }
		h, hn, _ = ops.Recurrent(b.Builder, "lstm", h, p("wih", 32, in), p("whh", 32, 8), p("bih", 32), p("bhh", 32), nil, nil)
	}
	logits := b.Linear("fc", hn, 3)
	loss := b.Op("cross_entropy", ir.Attrs{}, logits, y)
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	return b.Model("lstm", loss, logits, ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
}

// TestRecurrenceFlatInT checks that a recurrence is one construct: the
// kernels, plan steps and generated code of a 2-layer LSTM are the same for
// 3 and 200 time steps, but for the constants that carry T.
func TestRecurrenceFlatInT(t *testing.T) {
	type out struct {
		kernels, steps int
		src            string
	}
	digits := regexp.MustCompile(`[0-9]+`)
	get := func(T int) out {
		p, err := compiler.Compile(lstmModel(t, T), compiler.Options{Fuse: true})
		if err != nil {
			t.Fatal(err)
		}
		src, plan, err := Kernels(p)
		if err != nil {
			t.Fatal(err)
		}
		steps := 0
		for _, f := range plan.Funcs {
			steps += len(f.Steps)
		}
		return out{len(plan.Kernels), steps, digits.ReplaceAllString(src, "N")}
	}
	a, b := get(3), get(200)
	if a.kernels != b.kernels || a.steps != b.steps || a.src != b.src {
		t.Errorf("T 3: %d kernels, %d steps, %d bytes of code; T 200: %d, %d, %d", a.kernels, a.steps, len(a.src), b.kernels, b.steps, len(b.src))
	}
	t.Logf("%d kernels, %d steps", a.kernels, a.steps)
}
