package fuzzgen

import (
	"fmt"
	"math"
	"sort"
)

// tols are a comparison's tolerances: a value v against w agrees when
// |v - w| ≤ rtol·|w| + scale·S, S the largest magnitude of its kind
// (every gradient of the spec, or the tensor for the others), and the
// loss when |v - w| ≤ loss·max(|w|, 1). What follows an update (the
// parameters, the state, the later losses and the prediction) inherits
// the gradients' differences through the optimizer, so its tolerance is
// late times the first step's (10 unless set; see compare for Adam).
// exact asks for the same bits.
type tols struct {
	loss, rtol, scale float64
	late              float64
}

// mismatch describes the worst of the values of got not within tolerance
// of want (tol(i) for element i), or returns "".
func mismatch(got, want []float64, tol func(i int) float64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d values, want %d", len(got), len(want))
	}
	bad, worst, at := 0, 0.0, -1
	for i := range want {
		d := math.Abs(got[i] - want[i])
		t := tol(i)
		if d <= t || got[i] == want[i] || math.IsNaN(got[i]) && math.IsNaN(want[i]) {
			continue
		}
		bad++
		e := d / t
		if at < 0 || !(e <= worst) {
			worst, at = e, i
		}
	}
	if bad == 0 {
		return ""
	}
	how := fmt.Sprintf("%.3g× the tolerance %.3g", worst, tol(at))
	if tol(at) == 0 {
		how = "want the same bits"
	}
	return fmt.Sprintf("%d of %d values differ; worst [%d]: %.17g vs %.17g (%s)", bad, len(want), at, got[at], want[at], how)
}

func maxAbs(vs ...[]float64) float64 {
	m := 0.0
	for _, v := range vs {
		for _, x := range v {
			if a := math.Abs(x); a > m && !math.IsInf(a, 0) {
				m = a
			}
		}
	}
	return m
}

// sortedKeys lists m's keys in order.
func sortedKeys(m map[string][]float64) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// compare compares run a with run b (the reference) as check, spec by
// spec: exact[k] asks for the same bits from spec k, t gives the
// tolerances of the others.
func (c *checker) compare(check string, a, b *result, exact []bool, t tols) {
	lr, adam := 0.0, false
	if o := c.built.Model.Optimizer; o != nil {
		lr, adam = o.LR, o.Kind != "sgd"
	}
	if t.late == 0 {
		t.late = 10
	}
	allExact := true
	for _, e := range exact {
		allExact = allExact && e
	}
	steps := float64(c.o.Steps)
	where := a.what + " vs " + b.what
	// The largest gradient of each spec scales its gradients' tolerance.
	gmax := make([]float64, len(c.specs))
	for n, g := range b.grads {
		if k := c.specOf(n); k >= 0 {
			gmax[k] = math.Max(gmax[k], maxAbs(g))
		}
	}
	// The losses are O(1), so rounding puts noise of about scale into
	// every gradient however small the largest is: a spec whose gradients
	// are all 0 in the reference (a cross-entropy over one class) would
	// otherwise get no tolerance at all (fuzz_683: 0 against 9e-7).
	gradTol := func(k int, key string, w []float64) func(int) float64 {
		return func(i int) float64 {
			if exact[k] {
				return 0
			}
			return t.rtol*math.Abs(w[i]) + t.scale*math.Max(gmax[k], 1) + b.noise[key]
		}
	}
	// near0[k]: a gradient of spec k is rounding noise, within tolerance
	// of 0 and not the same in both runs, so Adam may step its parameter
	// by lr in opposite directions (see slack below). Gradients both runs
	// compute as the same value (an exact 0 among them) move alike.
	near0 := make([]bool, len(c.specs))
	for _, n := range sortedKeys(b.grads) {
		k := c.specOf(n)
		if k < 0 {
			continue
		}
		gt := gradTol(k, "grad:"+n, b.grads[n])
		if msg := mismatch(a.grads[n], b.grads[n], gt); msg != "" {
			c.fail(check, k, "%s: step 1 gradient of %s: %s", where, n, msg)
		}
		for i, g := range b.grads[n] {
			differ := i >= len(a.grads[n]) || a.grads[n][i] != g
			near0[k] = near0[k] || !exact[k] && differ && math.Abs(g) <= gt(i)
		}
	}
	anyNear0 := false
	for _, z := range near0 {
		anyNear0 = anyNear0 || z
	}
	if msg := mismatch(a.loss, b.loss, func(i int) float64 {
		if allExact {
			return 0
		}
		tol := t.loss*math.Max(math.Abs(b.loss[i]), 1) + b.noise["loss"]
		if i > 0 {
			tol *= t.late
			// The losses after the first update follow the parameters:
			// where Adam stepped noise-gradient parameters 2·lr apart a
			// step, the loss moves with them, as the prediction does
			// below (fuzz_324: a LayerNorm's weight whose gradient, the
			// mean of a normalised row, is rounding noise).
			if adam && anyNear0 {
				tol += 2 * float64(i) * lr * math.Max(math.Abs(b.loss[i]), 1)
			}
		}
		return tol
	}); msg != "" {
		spec := -1
		if len(c.specs) == 1 {
			spec = 0
		}
		c.fail(check, spec, "%s: loss per step: %s", where, msg)
	}
	for _, n := range sortedKeys(b.params) {
		k := c.specOf(n)
		if k < 0 {
			continue
		}
		w, g := b.params[n], b.grads[n]
		gt := gradTol(k, "grad:"+n, g)
		m := maxAbs(w)
		if msg := mismatch(a.params[n], w, func(i int) float64 {
			if exact[k] {
				return 0
			}
			tol := t.late*(t.rtol*math.Abs(w[i])+t.scale*m) + b.noise["param:"+n]
			if g == nil {
				return tol
			}
			// SGD moves a parameter by lr times its gradient, so by lr
			// times the gradient's tolerance more. Adam moves it by lr
			// times m/√v, a ratio of gradients: a relative difference δ/|g|
			// in the gradient moves it by about lr·δ/|g| a step, and a
			// gradient within tolerance of 0 may move it by lr either way
			// (2·lr apart).
			if adam {
				// (A gradient both runs must compute exactly, 0 included,
				// moves both alike: no allowance, not 0/0.)
				if gi := gt(i); gi > 0 {
					tol += steps * lr * math.Min(2, 2*t.late*gi/math.Abs(g[i]))
				}
				if near0[k] {
					// Noise-driven steps elsewhere in the spec change
					// this parameter's later gradients by more than
					// noise (fuzz_324: every layer under a LayerNorm
					// whose mean is the loss): Adam's bound, lr a step
					// either way, is all that holds.
					tol = math.Max(tol, t.late*(t.rtol*math.Abs(w[i])+t.scale*m)+2*steps*lr)
				}
			} else {
				tol += steps * lr * t.late * gt(i)
			}
			return tol
		}); msg != "" {
			c.fail(check, k, "%s: %s after %d steps: %s", where, n, c.o.Steps, msg)
		}
	}
	// The state after the steps (running statistics) and the prediction
	// follow the parameters: where Adam moved parameters with near-zero
	// gradients up to 2·steps·lr apart, they move too. A bias feeding a
	// batch norm is one: its true gradient is 0 and its computed one
	// rounding noise, whose sign Adam turns into a step of lr (fuzz_115).
	slack := func(k int, m float64) float64 {
		if adam && near0[k] {
			return 2 * steps * lr * math.Max(m, 1)
		}
		return 0
	}
	for _, n := range sortedKeys(b.states) {
		k := c.specOf(n)
		if k < 0 {
			continue
		}
		w := b.states[n]
		m := maxAbs(w)
		if msg := mismatch(a.states[n], w, func(i int) float64 {
			if exact[k] {
				return 0
			}
			return t.late*(t.rtol*math.Abs(w[i])+t.scale*m) + slack(k, m) + b.noise["state:"+n]
		}); msg != "" {
			c.fail(check, k, "%s: state %s after %d steps: %s", where, n, c.o.Steps, msg)
		}
	}
	for k := range c.specs {
		w := b.outs[k]
		m := maxAbs(w)
		if msg := mismatch(a.outs[k], w, func(i int) float64 {
			if exact[k] {
				return 0
			}
			return t.late*(t.rtol*math.Abs(w[i])+t.scale*m) + slack(k, m) + b.noise[fmt.Sprintf("out:%d", k)]
		}); msg != "" {
			c.fail(check, k, "%s: eval-mode prediction after %d steps: %s", where, c.o.Steps, msg)
		}
	}
}

// exactFuse reports, per spec, whether its fused and unfused builds do
// the same arithmetic (no op whose row says otherwise).
func (c *checker) exactFuse() []bool {
	out := make([]bool, len(c.specs))
	for k, s := range c.specs {
		out[k] = true
		for i := range s.Nodes {
			n := &s.Nodes[i]
			if r := table[n.Op]; r.inexact != nil && r.inexact(s, n) {
				out[k] = false
			}
		}
	}
	return out
}

// compareFuse compares the fused build (a) with the unfused one (b),
// both on the host forms.
func (c *checker) compareFuse(a, b *result) {
	c.compare("fused/unfused", a, b, c.exactFuse(), c.formTols())
}

// compareForms compares the GPU forms (a) with the CPU baseline forms
// (b) of the fused build.
func (c *checker) compareForms(a, b *result) {
	c.compare("gpu forms", a, b, make([]bool, len(c.specs)), c.formTols())
}

// formTols are the tolerances between two ngen builds or forms that
// differ in the order of sums (reduction launch shapes, fused and
// primitive forms of LayerNorm, softmax and attention): in f64 those of
// codegen/jit's TestGPUFormsJITModels (rtol 1e-10 for the loss, 1e-9
// plus 1e-12 of the largest for the rest); in f32 those of
// runtime/cpu's compareGenStep (1e-5 for the loss, 1e-4 plus 1e-5 of the
// largest gradient for the rest).
func (c *checker) formTols() tols {
	if c.specs[0].DType == "f64" {
		return tols{loss: 1e-10, rtol: 1e-9, scale: 1e-12}
	}
	return tols{loss: 1e-5, rtol: 1e-4, scale: 1e-5}
}
