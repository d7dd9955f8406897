package mlp_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
)

// TestAccumulateGenerated: through the generated API, 4 micro-batches of
// 16 rows (Options.AccumulationSteps, and Accumulate/Update) leave the
// gradient of one step on the 64 rows in Grad, and the same parameters
// after the update, for three updates on fresh data, with dropout off and
// on: dropout masks are keyed by the optimizer step and the global row
// (micro-batch j's rows are rows 16j.. of the large batch), so the
// micro-batches draw exactly the large batch's masks.
func TestAccumulateGenerated(t *testing.T) {
	for _, train := range []bool{false, true} {
		t.Run(fmt.Sprintf("dropout=%v", train), func(t *testing.T) { testAccumulate(t, train) })
	}
}

func testAccumulate(t *testing.T, train bool) {
	dev := device(t)
	const k, b, updates = 4, 16, 3
	big, err := mlp.New(dev, mlp.Options{Batch: k * b, Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	small, err := mlp.New(dev, mlp.Options{Batch: b, Seed: 6, AccumulationSteps: k})
	if err != nil {
		t.Fatal(err)
	}
	manual, err := mlp.New(dev, mlp.Options{Batch: b, Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*mlp.Model{big, small, manual} {
		if !train {
			m.Eval()
		}
	}
	// Adam moves each weight by about ±lr·sign(m/√v); where a gradient is
	// small against its tensor's (under 1% of the RMS), summation order
	// changes its relative value, and so the step, most, and Adam's
	// moments carry that into later steps. Such weights are skipped from
	// then on (a few percent of them; another mask changes most).
	fuzzy := map[string][]bool{}
	for _, name := range big.Params() {
		p, _ := big.Param(name)
		fuzzy[name] = make([]bool, len(p))
	}
	for u := 0; u < updates; u++ {
		x, y := batch(k*b, uint64(8+u))
		if _, err := big.Step(x, y); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < k; j++ {
			xs, ys := x[j*b*784:(j+1)*b*784], y[j*b:(j+1)*b]
			if _, err := small.Step(xs, ys); err != nil {
				t.Fatal(err)
			}
			if _, err := manual.Accumulate(xs, ys); err != nil {
				t.Fatal(err)
			}
		}
		if err := manual.Update(); err != nil {
			t.Fatal(err)
		}
		for _, name := range big.Params() {
			gw, _ := big.Grad(name)
			pw, _ := big.Param(name)
			fz, rms := fuzzy[name], 0.0
			for _, g := range gw {
				rms += float64(g) * float64(g)
			}
			rms = math.Sqrt(rms / float64(len(gw)))
			for i := range gw {
				if math.Abs(float64(gw[i])) <= 1e-2*rms {
					fz[i] = true
				}
			}
			for _, m := range []*mlp.Model{small, manual} {
				g, _ := m.Grad(name)
				p, _ := m.Param(name)
				for i := range gw {
					if fz[i] {
						continue
					}
					// f32 sums over the batch in another order, after
					// parameters that differ by as much: 1e-4 of the
					// gradient's scale.
					if d := math.Abs(float64(g[i] - gw[i])); d > 1e-4*(1e-3+math.Abs(float64(gw[i]))) && d > 1e-8 {
						t.Fatalf("update %d: %s grad[%d] = %g, want %g", u+1, name, i, g[i], gw[i])
					}
					// Adam's step is lr·m̂/(√v̂+ε): a relative error δ in
					// the gradients moves it by about δ·lr, so 1e-4·lr
					// (1e-7) absolute; other masks would differ by ~lr.
					if math.Abs(float64(p[i]-pw[i])) > 1e-6*math.Abs(float64(pw[i]))+1e-7 {
						t.Fatalf("update %d: %s[%d] = %g, want %g (grad %g)", u+1, name, i, p[i], pw[i], gw[i])
					}
				}
			}
		}
	}
}
