package mlp_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlpbench"
	"github.com/ngen-ml/ngen/generated/mlpbench_unfused"
	"github.com/ngen-ml/ngen/runtime"
)

// The benchmark MLP's packages against a float64 reference written here:
// the loss, every gradient and every parameter after one Adam step. Its
// kernels (1024 → 2048 → 512 → 10, no dropout) are specialised to these
// widths and run in no other model, so an index bug in one of them (a
// bias indexed modulo the wrong width, a reduction over the wrong stride)
// passes every test that runs other models, and every comparison of two
// runs of this one. Planted by hand in generated/mlpbench/mlpbench.cu
// (the fc1 bias read as `in1[(0) * 2048LL + (j + 1) % 2048]`; the fc2
// bias gradient's row stride 512LL as 511LL), each seen to fail here,
// reverted.

// benchModel is what both packages offer.
type benchModel interface {
	Step(x []float32, y []int32) (float32, error)
	Param(name string) ([]float32, error)
	Grad(name string) ([]float32, error)
	Close() error
}

var benchOpen = map[string]func(dev runtime.Device, batch int) (benchModel, error){
	"mlpbench": func(d runtime.Device, b int) (benchModel, error) {
		return mlpbench.New(d, mlpbench.Options{Batch: b, Seed: 5})
	},
	"mlpbench_unfused": func(d runtime.Device, b int) (benchModel, error) {
		return mlpbench_unfused.New(d, mlpbench_unfused.Options{Batch: b, Seed: 5})
	},
}

// benchLayers are the benchmark MLP's linear layers, input first.
var benchLayers = []struct {
	name    string
	in, out int
}{{"fc1", 1024, 2048}, {"fc2", 2048, 512}, {"fc3", 512, 10}}

// refStep is one training step in float64: PyTorch's Linear (weight
// out×in), ReLU between layers, mean cross-entropy. It returns the loss
// and the gradient of every parameter.
func refStep(p map[string][]float64, x []float64, y []int32, rows int) (float64, map[string][]float64) {
	acts := [][]float64{x} // the input of each layer
	pre := [][]float64{}   // each layer's pre-activation
	for l, ly := range benchLayers {
		w, b := p[ly.name+".weight"], p[ly.name+".bias"]
		in := acts[l]
		z := make([]float64, rows*ly.out)
		for r := range rows {
			for o := range ly.out {
				s := b[o]
				for i := range ly.in {
					s += in[r*ly.in+i] * w[o*ly.in+i]
				}
				z[r*ly.out+o] = s
			}
		}
		pre = append(pre, z)
		if l < len(benchLayers)-1 {
			a := make([]float64, len(z))
			for i, v := range z {
				a[i] = math.Max(v, 0)
			}
			acts = append(acts, a)
		}
	}
	logits := pre[len(pre)-1]
	const classes = 10
	loss := 0.0
	dz := make([]float64, rows*classes)
	for r := range rows {
		row := logits[r*classes : (r+1)*classes]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = math.Max(mx, v)
		}
		sum := 0.0
		for _, v := range row {
			sum += math.Exp(v - mx)
		}
		lse := mx + math.Log(sum)
		loss += (lse - row[y[r]]) / float64(rows)
		for j, v := range row {
			d := math.Exp(v - lse)
			if int32(j) == y[r] {
				d--
			}
			dz[r*classes+j] = d / float64(rows)
		}
	}
	grads := map[string][]float64{}
	for l := len(benchLayers) - 1; l >= 0; l-- {
		ly := benchLayers[l]
		in, w := acts[l], p[ly.name+".weight"]
		gw, gb := make([]float64, ly.out*ly.in), make([]float64, ly.out)
		din := make([]float64, rows*ly.in)
		for r := range rows {
			for o := range ly.out {
				d := dz[r*ly.out+o]
				if d == 0 {
					continue
				}
				gb[o] += d
				for i := range ly.in {
					gw[o*ly.in+i] += d * in[r*ly.in+i]
					din[r*ly.in+i] += d * w[o*ly.in+i]
				}
			}
		}
		grads[ly.name+".weight"], grads[ly.name+".bias"] = gw, gb
		if l > 0 {
			for i := range din {
				if pre[l-1][i] <= 0 {
					din[i] = 0
				}
			}
			dz = din
		}
	}
	return loss, grads
}

// TestMLPBenchOracle: f32 kernels and GEMMs against the f64 reference.
// Sums run over at most 2048 terms in f32: the loss agrees to rtol 1e-5, a
// gradient to 1e-3 of itself plus 1e-4 of the layer's largest. Adam's
// first step moves a parameter by lr·g/(|g|+eps), which is ±lr except
// where g is within that tolerance of zero: those may land anywhere in
// [p-lr, p+lr]; every other parameter agrees to 1e-6 + 1e-5 of itself.
func TestMLPBenchOracle(t *testing.T) {
	const rows, lr, eps = 6, 1e-3, 1e-8
	rng := rand.New(rand.NewPCG(12, 34))
	x32 := make([]float32, rows*1024)
	x := make([]float64, len(x32))
	for i := range x32 {
		x32[i] = rng.Float32()*2 - 1
		x[i] = float64(x32[i])
	}
	y := make([]int32, rows)
	for i := range y {
		y[i] = int32(rng.IntN(10))
	}
	for _, name := range []string{"mlpbench", "mlpbench_unfused"} {
		t.Run(name, func(t *testing.T) {
			m, err := benchOpen[name](device(t), rows)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			p := map[string][]float64{}
			for _, ly := range benchLayers {
				for _, n := range []string{ly.name + ".weight", ly.name + ".bias"} {
					v, err := m.Param(n)
					if err != nil {
						t.Fatal(err)
					}
					p[n] = f64s(v)
				}
			}
			wantLoss, wantGrads := refStep(p, x, y, rows)
			loss, err := m.Step(x32, y)
			if err != nil {
				t.Fatal(err)
			}
			if math.Abs(float64(loss)-wantLoss) > 1e-5*wantLoss {
				t.Fatalf("loss %v, reference %v", loss, wantLoss)
			}
			for n, want := range wantGrads {
				got, err := m.Grad(n)
				if err != nil {
					t.Fatal(err)
				}
				after, err := m.Param(n)
				if err != nil {
					t.Fatal(err)
				}
				gmax := 0.0
				for _, v := range want {
					gmax = math.Max(gmax, math.Abs(v))
				}
				for i, w := range want {
					tol := 1e-3*math.Abs(w) + 1e-4*gmax
					if d := math.Abs(float64(got[i]) - w); d > tol || math.IsNaN(float64(got[i])) {
						t.Fatalf("grad %s[%d] = %v, reference %v", n, i, got[i], w)
					}
					step := lr * w / (math.Abs(w) + eps)
					ptol := 1e-6 + 1e-5*math.Abs(p[n][i])
					if math.Abs(w) <= tol {
						step, ptol = 0, lr+ptol
					}
					if d := math.Abs(float64(after[i]) - (p[n][i] - step)); d > ptol {
						t.Fatalf("param %s[%d] after the step = %v, reference %v (from %v)", n, i, after[i], p[n][i]-step, p[n][i])
					}
				}
			}
		})
	}
}

func f64s(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
