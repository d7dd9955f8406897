package mlp_test

import (
	"math"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/generated/mlp_unfused"
	"github.com/ngen-ml/ngen/runtime"
)

// Cross-entropy must subtract the row's maximum before exponentiating:
// at logits of 1e4, expf overflows to infinity otherwise, although the
// loss is an ordinary number. Only stability differs, so no test at
// ordinary logits sees the difference. Planted by hand (codegen/
// crossentropy.go without `- mx` in both exponentials, mx = 0),
// regenerated, seen to fail here, reverted.

type stabilityModel interface {
	Step(x []float32, y []int32) (float32, error)
	Grad(name string) ([]float32, error)
	SetParam(name string, v []float32) error
	Close() error
}

// TestCrossEntropyLargeLogits sets the last layer's weights to zero and
// its bias to 1e4 - 3k for class k, so every row's logits are exactly the
// bias, and checks the loss and the bias gradient against float64.
func TestCrossEntropyLargeLogits(t *testing.T) {
	const rows, classes = 4, 10
	opens := map[string]func(runtime.Device) (stabilityModel, error){
		"mlp": func(d runtime.Device) (stabilityModel, error) { return mlp.New(d, mlp.Options{Batch: rows, Seed: 1}) },
		"mlp_unfused": func(d runtime.Device) (stabilityModel, error) {
			return mlp_unfused.New(d, mlp_unfused.Options{Batch: rows, Seed: 1})
		},
		"mlpbench": func(d runtime.Device) (stabilityModel, error) {
			m, err := benchOpen["mlpbench"](d, rows)
			if err != nil {
				return nil, err
			}
			return m.(stabilityModel), nil
		},
		"mlpbench_unfused": func(d runtime.Device) (stabilityModel, error) {
			m, err := benchOpen["mlpbench_unfused"](d, rows)
			if err != nil {
				return nil, err
			}
			return m.(stabilityModel), nil
		},
	}
	ins := map[string]int{"mlp": 784, "mlp_unfused": 784, "mlpbench": 1024, "mlpbench_unfused": 1024}
	bias := make([]float32, classes)
	for k := range bias {
		bias[k] = 1e4 - 3*float32(k) // exact in f32
	}
	y := []int32{0, 3, 9, 5}
	// float64 reference: lse = 1e4 + log Σ exp(-3k).
	s := 0.0
	for k := range classes {
		s += math.Exp(-3 * float64(k))
	}
	lse := 1e4 + math.Log(s)
	wantLoss, wantGrad := 0.0, make([]float64, classes)
	for _, l := range y {
		wantLoss += (lse - float64(bias[l])) / rows
		for k := range classes {
			p := math.Exp(float64(bias[k]) - lse)
			if int32(k) == l {
				p--
			}
			wantGrad[k] += p / rows
		}
	}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			m, err := open(device(t))
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if err := m.SetParam("fc3.weight", make([]float32, classes*map[string]int{"mlp": 256, "mlp_unfused": 256, "mlpbench": 512, "mlpbench_unfused": 512}[name])); err != nil {
				t.Fatal(err)
			}
			if err := m.SetParam("fc3.bias", bias); err != nil {
				t.Fatal(err)
			}
			x := make([]float32, rows*ins[name])
			for i := range x {
				x[i] = float32(i%7) * 0.1
			}
			loss, err := m.Step(x, y)
			if err != nil {
				t.Fatalf("logits of 1e4: %v", err)
			}
			// f32: the loss is lse - logit with lse ≈ 1e4, so its
			// absolute error is that of 1e4 in f32 (about 1e-3).
			if math.IsNaN(float64(loss)) || math.Abs(float64(loss)-wantLoss) > 2e-3 {
				t.Fatalf("loss %v at logits of 1e4, want %v", loss, wantLoss)
			}
			g, err := m.Grad("fc3.bias")
			if err != nil {
				t.Fatal(err)
			}
			for k := range g {
				// The kernel takes exp(x - lse) with lse rounded to f32
				// near 1e4 (ulp 2^-10): up to 1e-3 relative, 1e-3 absolute.
				if math.IsNaN(float64(g[k])) || math.Abs(float64(g[k])-wantGrad[k]) > 1e-3 {
					t.Fatalf("fc3.bias gradient[%d] = %v at logits of 1e4, want %v", k, g[k], wantGrad[k])
				}
			}
		})
	}
}
