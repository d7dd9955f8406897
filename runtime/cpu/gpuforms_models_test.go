package cpu_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/ngen-ml/ngen/generated/convnet"
	"github.com/ngen-ml/ngen/generated/convnet_bn"
	"github.com/ngen-ml/ngen/generated/convnet_bn_unfused"
	"github.com/ngen-ml/ngen/generated/convnet_unfused"
	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/generated/mlp_unfused"
	"github.com/ngen-ml/ngen/generated/mlpbench"
	"github.com/ngen-ml/ngen/generated/mlpbench_unfused"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// Every generated package's training step with the GPU forms
// (cpu.Options.GPUForms: grid-stride loops, warp shuffles and launch
// shapes as the GPU runs them) against the default CPU forms.
//
// Planted bugs this file catches (each planted by hand, seen to fail,
// reverted):
//   - an off-by-one in the GPU grid-stride bound (NGEN_GRID_STRIDE's
//     `i < (n)` as `i <= (n)` in codegen/preamble.cuh, regenerated):
//     TestGPUFormsGeneratedPackages fails on convnet_bn and
//     convnet_bn_unfused (elsewhere the stray element lands in padding or
//     is overwritten); codegen's TestPreambleGridStride catches it, and
//     the ROWS form's, on its own;
//   - a wrong GPU warp butterfly (ngen_warp_sum starting at `o = 8`,
//     regenerated): TestGPUFormsGeneratedPackages fails on all four
//     ConvNet packages (their per-channel reductions); codegen's
//     TestPreambleWarpButterfly catches it on its own.

// genModel is what every generated package offers.
type genModel interface {
	Step(x []float32, y []int32) (float32, error)
	Params() []string
	Param(name string) ([]float32, error)
	Grad(name string) ([]float32, error)
	Close() error
}

type genPackage struct {
	in, batch int
	open      func(dev runtime.Device, batch int) (genModel, error)
}

// genPackages has one row per directory of generated/;
// TestGPUFormsCoversEveryPackage fails when a new one is missing here.
var genPackages = map[string]genPackage{
	"mlp": {784, 32, func(d runtime.Device, b int) (genModel, error) { return mlp.New(d, mlp.Options{Batch: b, Seed: 7}) }},
	"mlp_unfused": {784, 32, func(d runtime.Device, b int) (genModel, error) {
		return mlp_unfused.New(d, mlp_unfused.Options{Batch: b, Seed: 7})
	}},
	"mlpbench": {1024, 32, func(d runtime.Device, b int) (genModel, error) {
		return mlpbench.New(d, mlpbench.Options{Batch: b, Seed: 7})
	}},
	"mlpbench_unfused": {1024, 32, func(d runtime.Device, b int) (genModel, error) {
		return mlpbench_unfused.New(d, mlpbench_unfused.Options{Batch: b, Seed: 7})
	}},
	"convnet": {784, 8, func(d runtime.Device, b int) (genModel, error) {
		return convnet.New(d, convnet.Options{Batch: b, Seed: 7})
	}},
	"convnet_unfused": {784, 8, func(d runtime.Device, b int) (genModel, error) {
		return convnet_unfused.New(d, convnet_unfused.Options{Batch: b, Seed: 7})
	}},
	"convnet_bn": {784, 8, func(d runtime.Device, b int) (genModel, error) {
		return convnet_bn.New(d, convnet_bn.Options{Batch: b, Seed: 7})
	}},
	"convnet_bn_unfused": {784, 8, func(d runtime.Device, b int) (genModel, error) {
		return convnet_bn_unfused.New(d, convnet_bn_unfused.Options{Batch: b, Seed: 7})
	}},
}

// TestGPUFormsCoversEveryPackage: a package generated later must join
// genPackages, or its GPU forms would go untested.
func TestGPUFormsCoversEveryPackage(t *testing.T) {
	dirs, err := os.ReadDir(filepath.Join("..", "..", "generated"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		n++
		if _, ok := genPackages[d.Name()]; !ok {
			t.Errorf("generated/%s has no row in genPackages (runtime/cpu/gpuforms_models_test.go)", d.Name())
		}
	}
	if n == 0 {
		t.Fatal("no packages under generated/")
	}
}

func genBatch(n, in int) ([]float32, []int32) {
	rng := rand.New(rand.NewPCG(3, 9))
	x := make([]float32, n*in)
	y := make([]int32, n)
	for i := range x {
		x[i] = rng.Float32()
	}
	for i := range y {
		y[i] = int32(rng.IntN(10))
	}
	return x, y
}

// TestGPUFormsGeneratedPackages runs two training steps of every generated
// package on a default CPU device and on one with GPUForms, from the same
// seed and batch, and compares the loss, every gradient and every
// parameter after the first, and the loss of the second.
func TestGPUFormsGeneratedPackages(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles every generated package's kernels again (-short)")
	}
	// The forms compared must do the same arithmetic: the host forms of
	// the recurrences and of attention otherwise change the order of sums
	// and, on a host with AVX2 and FMA, contract products into FMAs, so
	// the host device runs the baseline forms (cpu.Options.Baseline;
	// compiler/ops/recur_solo.go; the sequence models' oracle tests check
	// the host forms against PyTorch).
	// NGEN_GPUFORMS_NATIVE=1 compares the forms as the default build runs
	// them instead (FMAs and all), to tell a CPU-only path from a GPU form.
	host := newDev(t, cpu.Options{Threads: 2, Baseline: os.Getenv("NGEN_GPUFORMS_NATIVE") == ""})
	gpu := newDev(t, cpu.Options{Threads: 2, GPUForms: true})
	names := make([]string, 0, len(genPackages))
	for n := range genPackages {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		p := genPackages[name]
		t.Run(name, func(t *testing.T) {
			if why, ok := knownGPUFormsGaps[name]; ok {
				t.Skip(why)
			}
			a, err := p.open(gpu, p.batch)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := p.open(host, p.batch)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			x, y := genBatch(p.batch, p.in)
			compareGenStep(t, "step 1", a, b, x, y)
			// After step 1 the parameters whose gradients were rounding
			// noise are up to 2·lr apart (see compareGenStep), which
			// moves the second loss by about 1e-5 relative (batch norm
			// amplifies it most): rtol 1e-4.
			la, err := a.Step(x, y)
			if err != nil {
				t.Fatalf("step 2 (GPU forms): %v", err)
			}
			lb, err := b.Step(x, y)
			if err != nil {
				t.Fatalf("step 2: %v", err)
			}
			if d := math.Abs(float64(la - lb)); d > 1e-4*math.Abs(float64(lb)) || math.IsNaN(float64(la)) {
				t.Fatalf("step 2: loss %v with the GPU forms, %v without", la, lb)
			}
		})
	}
}

func newDev(t *testing.T, o cpu.Options) *cpu.Device {
	t.Helper()
	d, err := cpu.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// compareGenStep takes one step on a (GPU forms) and b (CPU forms). Both
// run the same arithmetic in the same GEMMs; what differs is the order
// of the sums that a reduction kernel's GPU launch shape splits across
// threads and warps (the CPU forms run reductions with one-thread blocks):
// f32 reassociation over at most a few thousand terms, so the loss
// agrees to rtol 1e-5 and a gradient to rtol 1e-4 plus 1e-5 of the
// largest gradient. Adam's first update is about lr·sign(g), so a
// parameter whose gradient is within that tolerance of zero may move by
// up to 2·lr apart; every other parameter agrees to rtol 1e-5, atol 1e-7.
func compareGenStep(t *testing.T, what string, a, b genModel, x []float32, y []int32) {
	t.Helper()
	la, err := a.Step(x, y)
	if err != nil {
		t.Fatalf("%s (GPU forms): %v", what, err)
	}
	lb, err := b.Step(x, y)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if d := math.Abs(float64(la - lb)); d > 1e-5*math.Abs(float64(lb)) || math.IsNaN(float64(la)) {
		t.Fatalf("%s: loss %v with the GPU forms, %v without", what, la, lb)
	}
	const lr = 1e-3 // every generated model's Adam
	grads := map[string][2][]float32{}
	gmax := 0.0
	for _, n := range b.Params() {
		ga, err1 := a.Grad(n)
		gb, err2 := b.Grad(n)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		grads[n] = [2][]float32{ga, gb}
		for _, v := range gb {
			gmax = math.Max(gmax, math.Abs(float64(v)))
		}
	}
	worst, at := 0.0, "" // the largest gradient difference beyond rtol 1e-4, in units of 1e-5·gmax
	defer func() {
		t.Logf("%s: gradients differ by up to %.3g × 1e-5 of the largest (%.3g) beyond rtol 1e-4, at %s", what, worst, gmax, at)
	}()
	for _, n := range b.Params() {
		g := grads[n]
		near0 := make([]bool, len(g[1]))
		for i := range g[1] {
			tol := 1e-4*math.Abs(float64(g[1][i])) + 1e-5*gmax
			near0[i] = math.Abs(float64(g[1][i])) <= tol
			d := math.Abs(float64(g[0][i] - g[1][i]))
			if r := (d - 1e-4*math.Abs(float64(g[1][i]))) / (1e-5 * gmax); r > worst {
				worst, at = r, fmt.Sprintf("%s[%d]", n, i)
			}
			if d > tol || math.IsNaN(float64(g[0][i])) {
				t.Fatalf("%s: grad %s[%d] = %v with the GPU forms, %v without", what, n, i, g[0][i], g[1][i])
			}
		}
		pa, err1 := a.Param(n)
		pb, err2 := b.Param(n)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		for i := range pb {
			tol := 1e-7 + 1e-5*math.Abs(float64(pb[i]))
			if near0[i] {
				tol = 2 * lr
			}
			if d := math.Abs(float64(pa[i] - pb[i])); d > tol || math.IsNaN(float64(pa[i])) {
				t.Fatalf("%s: param %s[%d] = %v with the GPU forms, %v without", what, n, i, pa[i], pb[i])
			}
		}
	}
}
