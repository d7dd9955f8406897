package mlp_test

import (
	"math"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
)

// TestAccumulateGenerated: through the generated API, 4 micro-batches of
// 16 rows (Options.AccumulationSteps, and Accumulate/Update) leave the
// gradient of one step on the 64 rows in Grad, and the same parameters
// after the update.
func TestAccumulateGenerated(t *testing.T) {
	dev := device(t)
	const k, b = 4, 16
	x, y := batch(k*b, 8)
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
		m.Eval() // dropout off: its masks are keyed per call (see README)
	}
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
		for _, m := range []*mlp.Model{small, manual} {
			g, _ := m.Grad(name)
			p, _ := m.Param(name)
			for i := range gw {
				// f32 sums over the batch in another order: 1e-5 of the
				// gradient's scale.
				if d := math.Abs(float64(g[i] - gw[i])); d > 1e-5*(1e-3+math.Abs(float64(gw[i]))) && d > 1e-8 {
					t.Fatalf("%s grad[%d] = %g, want %g", name, i, g[i], gw[i])
				}
				// Adam's first step moves each weight by about ±lr·sign(g):
				// the same to an ulp or two where the gradient is not
				// within rounding of zero.
				if math.Abs(float64(gw[i])) > 1e-6 && math.Abs(float64(p[i]-pw[i])) > 1e-6*math.Abs(float64(pw[i]))+1e-9 {
					t.Fatalf("%s[%d] = %g, want %g (grad %g)", name, i, p[i], pw[i], gw[i])
				}
			}
		}
	}
}
