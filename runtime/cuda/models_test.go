//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"

	_ "github.com/ngen-ml/ngen/generated/all"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// The GPU suite: every generated model's training step on the GPU against
// the CPU backend (which runs the same CUDA C on the host), and the fused
// plan against the unfused one on the GPU. Without a device each test
// skips with one line (newDevice).

// genModel is a row of the suite: a model's fused and unfused packages,
// from the registry (generated/all links every generated package), and
// the batch the suite runs it at.
type genModel struct {
	name           string
	batch          int
	fused, unfused *runtime.Generated
}

// genModels has a row for every registered package of generated/ with an
// _unfused partner: adding a model to generated/ adds its row.
var genModels = func() []genModel {
	byName := map[string]*runtime.Generated{}
	for _, g := range runtime.RegisteredAll() {
		if strings.HasPrefix(g.Path, "github.com/ngen-ml/ngen/generated/") {
			byName[g.Name] = g
		}
	}
	var rows []genModel
	for name, g := range byName {
		if u, ok := byName[name+"_unfused"]; ok {
			rows = append(rows, genModel{name, suiteBatch(g), g, u})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].name < rows[j].name })
	return rows
}()

// suiteBatch is the largest power of two up to 32 whose step costs at
// most 1e9 FLOPs, and at least 4 (the Transformers).
func suiteBatch(g *runtime.Generated) int {
	var flops int64
	for _, f := range g.Plan.Funcs {
		if f.Name == "step" {
			for _, st := range f.Steps {
				flops += st.Flops.Eval(map[string]int{"B": 1})
			}
		}
	}
	b := 32
	for b > 4 && int64(b)*flops > 1e9 {
		b /= 2
	}
	return b
}

// open makes an instance of g on dev at the row's batch.
func (m genModel) open(g *runtime.Generated, dev runtime.Device) (*runtime.Model, error) {
	return g.New(dev, runtime.SessionOptions{MaxBatch: m.batch, Seed: 7})
}

// adamLR is the learning rate of every generated model.
const adamLR = 1e-3

// modelBatch is the suite's batch of n rows for g: runtime.SampleInputs
// with one seed, so both sides of a comparison see the same data.
func modelBatch(t *testing.T, g *runtime.Generated, n int) runtime.Inputs {
	t.Helper()
	in, err := g.SampleInputs("step", n, 3)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// compareSteps runs 3 steps of a and b on one batch and compares the loss
// of each, every gradient, and the parameters after each step. Adam moves
// every parameter by about lr·sign(gradient) whatever its size, so where
// the first gradient is rounding noise (below 1e-3 of the largest), the two
// sides may step apart by up to 2·3·lr; those elements get that bound.
func compareSteps(t *testing.T, a, b *runtime.Model, batch int, rtol, atol float64) {
	t.Helper()
	in := modelBatch(t, a.Generated(), batch)
	noise := map[string][]bool{}
	for step := 1; step <= 3; step++ {
		la, err := a.Step(in)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := b.Step(in)
		if err != nil {
			t.Fatal(err)
		}
		if math.Abs(la-lb) > atol+rtol*math.Abs(lb) {
			t.Fatalf("step %d: loss %v vs %v", step, la, lb)
		}
		grads := map[string][2][]float64{}
		gmax := 0.0
		for _, name := range a.Params() {
			ga, err1 := a.Grad(name)
			gb, err2 := b.Grad(name)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			grads[name] = [2][]float64{ga, gb}
			for _, v := range gb {
				gmax = math.Max(gmax, math.Abs(v))
			}
		}
		if step == 1 {
			// Each gradient's largest difference, for the log of a failure.
			for _, name := range a.Params() {
				g, worst := grads[name], 0.0
				for i := range g[0] {
					worst = math.Max(worst, math.Abs(g[0][i]-g[1][i]))
				}
				t.Logf("step 1: grad %s differs by up to %.2g of the largest gradient (%.3g)", name, worst/gmax, gmax)
			}
		}
		for _, name := range a.Params() {
			g := grads[name]
			if step == 1 {
				noise[name] = make([]bool, len(g[1]))
			}
			for i := range g[0] {
				if step == 1 {
					noise[name][i] = math.Abs(g[1][i]) < 1e-3*gmax
				}
				if step == 1 && math.Abs(g[0][i]-g[1][i]) > atol+rtol*math.Abs(g[1][i])+1e-4*gmax {
					t.Fatalf("step %d: grad %s[%d] %v vs %v (largest gradient %.3g: %.2g of it)", step, name, i, g[0][i], g[1][i], gmax, math.Abs(g[0][i]-g[1][i])/gmax)
				}
			}
			pa, err1 := a.Param(name)
			pb, err2 := b.Param(name)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			for i := range pa {
				// After the first step, the parameters whose gradients
				// were rounding noise differ by up to 2·lr, which
				// changes the forward pass (ConvNet + BN: the loss by
				// 5e-6 relative) and every later gradient a little;
				// Adam's normalisation turns that into update
				// differences of up to 5% of lr (seen) where a gradient
				// is small, and a ReLU pre-activation within rounding of
				// its kink flips an element's gradient: 0.26·lr (H100,
				// 2026-11-27, the TransformerLM fused against unfused
				// after step 2) and 0.28·lr (GPU against CPU) seen.
				// Allow 0.4·lr per step after the first: a wrong update
				// (a bias correction off by a step) is off by half an lr
				// or more.
				tol := atol + rtol*math.Abs(pb[i]) + 0.4*adamLR*float64(step-1)
				if noise[name][i] {
					tol = 6e-3
				}
				if math.Abs(pa[i]-pb[i]) > tol {
					t.Fatalf("step %d: param %s[%d] %v vs %v", step, name, i, pa[i], pb[i])
				}
			}
		}
	}
}

// knownGPUvsCPUGaps are rows whose GPU-against-CPU comparison cannot hold
// in f32, with why. TestModelsFusedVsUnfusedGPU and TestGraphsMatchEager
// still run them on the GPU.
var knownGPUvsCPUGaps = map[string]string{
	// Measured on an H100 (2026-11-25): after one step the GPU's
	// gradients of bn2.bias[43] and, through it, of conv2, bn1 and conv1
	// differ from the CPU's by up to 3e-3 of the largest gradient. On this
	// batch one of channel 43's BN outputs before the ReLU is 3.3e-6 of a
	// standard deviation above zero (PyTorch, f64); its conv2 sum cancels
	// 24-fold (sum of |terms| 5.9, value 0.249), so f32 summation orders
	// differ there by about 8e-6 standard deviations and the CPU's result
	// falls below the ReLU's kink while the GPU's, like PyTorch's f32
	// result, stays above: the GPU's conv1.weight[0] gradient is 0.0051119,
	// PyTorch's 0.0051119 (f32 and f64), the CPU's 0.0051747. Every batch of
	// this size has BN outputs within about 1e-5 standard deviations of a
	// ReLU kink (checked over 30 seeds), so no batch makes the comparison
	// safe; a wrong kernel shows up in TestModelsFusedVsUnfusedGPU, in
	// runtime/cpu's GPU-forms test and in models/convnet's PyTorch oracle.
	"convnet_bn/fused=true":  convnetBNKink,
	"convnet_bn/fused=false": convnetBNKink,
	// The fused TransformerLM on this batch: decoder layer 1's linear1
	// has a pre-activation 5e-8 above zero in f64 (runtime/cpu's
	// GPU-forms test found it, knownGPUFormsGaps' history), and the CPU's
	// and the GPU's f32 sums fall on either side of that ReLU (H100,
	// 2026-11-25: one parameter 0.28·lr apart after step 2).
	"transformer/fused=true": "a ReLU pre-activation 5e-8 from its kink: f32 summation orders put the GPU and the CPU on either side (see knownGPUvsCPUGaps)",
}

const convnetBNKink = "a BN output 3.3e-6 standard deviations from a ReLU kink: f32 summation orders put the GPU (with PyTorch) and the CPU on either side (see knownGPUvsCPUGaps)"

// TestModelsGPUvsCPU: the GPU contracts a*b+c into FMAs (--fmad=true) and
// cuBLAS picks its own summation order, where the CPU backend does
// neither, so f32 results agree to rtol 1e-3, atol 1e-5, and first-step
// gradients to 1e-4 of the largest gradient (see compareSteps for Adam).
func TestModelsGPUvsCPU(t *testing.T) {
	gpu := newDevice(t)
	host, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	for _, m := range genModels {
		for _, fused := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fused=%v", m.name, fused), func(t *testing.T) {
				if why, ok := knownGPUvsCPUGaps[fmt.Sprintf("%s/fused=%v", m.name, fused)]; ok {
					t.Skip(why)
				}
				g := m.fused
				if !fused {
					g = m.unfused
				}
				a, err := m.open(g, gpu)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				b, err := m.open(g, host)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				compareSteps(t, a, b, m.batch, 1e-3, 1e-5)
			})
		}
	}
}

// TestModelsFusedVsUnfusedGPU runs the fused and unfused plans of each
// model on the GPU: the same arithmetic in different kernel groupings
// (and reduction splits), rtol 1e-4, atol 1e-6.
func TestModelsFusedVsUnfusedGPU(t *testing.T) {
	gpu := newDevice(t)
	for _, m := range genModels {
		t.Run(m.name, func(t *testing.T) {
			a, err := m.open(m.fused, gpu)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := m.open(m.unfused, gpu)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			compareSteps(t, a, b, m.batch, 1e-4, 1e-6)
		})
	}
}

// TestCompareStepsHarness runs the suite's comparison without a GPU, on
// two CPU devices with different thread counts (different reduction
// splits), so the harness itself is exercised wherever the tests run.
func TestCompareStepsHarness(t *testing.T) {
	one, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	two, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	for _, m := range genModels {
		t.Run(m.name, func(t *testing.T) {
			a, err := m.open(m.fused, one)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := m.open(m.fused, two)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			compareSteps(t, a, b, m.batch, 1e-4, 1e-6)
		})
	}
}
