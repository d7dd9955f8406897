package cpu_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/ngen-ml/ngen/generated/all"
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

// generatedHere are the registered packages of this repository's
// generated/ (generated/all links every one).
func generatedHere() []*runtime.Generated {
	var out []*runtime.Generated
	for _, g := range runtime.RegisteredAll() {
		if strings.HasPrefix(g.Path, "github.com/ngen-ml/ngen/generated/") {
			out = append(out, g)
		}
	}
	return out
}

// TestRegistryCoversGenerated: every package under generated/ is linked
// by generated/all and registered, so the suites that iterate over the
// registry cover it.
func TestRegistryCoversGenerated(t *testing.T) {
	dirs, err := os.ReadDir(filepath.Join("..", "..", "generated"))
	if err != nil {
		t.Fatal(err)
	}
	reg := map[string]bool{}
	for _, g := range generatedHere() {
		reg[g.Name] = true
	}
	n := 0
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		// The index packages (all, fused) hold no plan: they only import.
		if _, err := os.Stat(filepath.Join("..", "..", "generated", d.Name(), "plan.json")); err != nil {
			continue
		}
		n++
		if !reg[d.Name()] {
			t.Errorf("generated/%s is not registered: regenerate (go generate ./...) so that generated/all imports it", d.Name())
		}
	}
	if n == 0 || n != len(reg) {
		t.Fatalf("%d packages under generated/, %d registered", n, len(reg))
	}
}

// gpuFormsBatch is the batch a package's comparison runs at: the largest
// power of two up to 32 whose step costs at most 2e8 FLOPs, and at least
// 2 (the GPU forms run every thread of every block, fibers where a
// kernel synchronises, so the Transformers take batch 2).
func gpuFormsBatch(g *runtime.Generated) int {
	var flops int64
	for _, f := range g.Plan.Funcs {
		if f.Name == "step" {
			for _, st := range f.Steps {
				flops += st.Flops.Eval(map[string]int{"B": 1})
			}
		}
	}
	b := 32
	for b > 2 && int64(b)*flops > 2e8 {
		b /= 2
	}
	return b
}

// The batch is runtime.SampleInputs's for seed 1. A ReLU's derivative
// jumps at 0:
// where a pre-activation lies within f32 rounding of 0, the GPU forms and
// the CPU forms may take its two sides, and that one element's gradient
// (the whole upstream gradient or none of it) then moves every gradient
// below it, while the losses agree. Both forms' kernels are right then;
// a package whose batch puts a pre-activation there needs another seed.
// (The fused TransformerLM's former batch did, at 2.2e-7 from 0, which the
// forms' rounding of the LayerNorm and GEMM inputs straddled; seed 1's
// batch passes every package.) If a later change to rounding moves one
// across, the row fails with a gradient differing by a large fraction of
// the largest while the losses agree: look for a ReLU sign flip before
// looking for a kernel bug.

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
	// The packages run two full steps here, GPU forms and all: at the
	// JIT's default -O0 their run time outweighs what -O1 costs in g++
	// (112 against 89 s on a cold cache).
	if os.Getenv("NGEN_JIT_OPT") == "" {
		t.Setenv("NGEN_JIT_OPT", "-O1")
	}
	host := newDev(t, cpu.Options{Threads: 2, Baseline: os.Getenv("NGEN_GPUFORMS_NATIVE") == ""})
	gpu := newDev(t, cpu.Options{Threads: 2, GPUForms: true})
	for _, g := range generatedHere() {
		t.Run(g.Name, func(t *testing.T) {
			batch := gpuFormsBatch(g)
			in, err := g.SampleInputs("step", batch, 1)
			if err != nil {
				t.Fatal(err)
			}
			a, err := g.New(gpu, runtime.SessionOptions{MaxBatch: batch, Seed: 7})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := g.New(host, runtime.SessionOptions{MaxBatch: batch, Seed: 7})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			compareGenStep(t, "step 1", a, b, in)
			// After step 1 the parameters whose gradients were rounding
			// noise are up to 2·lr apart (see compareGenStep), which
			// moves the second loss by about 1e-5 relative (batch norm
			// amplifies it most): rtol 1e-4.
			la, err := a.Step(in)
			if err != nil {
				t.Fatalf("step 2 (GPU forms): %v", err)
			}
			lb, err := b.Step(in)
			if err != nil {
				t.Fatalf("step 2: %v", err)
			}
			if d := math.Abs(la - lb); d > 1e-4*math.Abs(lb) || math.IsNaN(la) {
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
func compareGenStep(t *testing.T, what string, a, b *runtime.Model, in runtime.Inputs) {
	t.Helper()
	la, err := a.Step(in)
	if err != nil {
		t.Fatalf("%s (GPU forms): %v", what, err)
	}
	lb, err := b.Step(in)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if d := math.Abs(la - lb); d > 1e-5*math.Abs(lb) || math.IsNaN(la) {
		t.Fatalf("%s: loss %v with the GPU forms, %v without", what, la, lb)
	}
	const lr = 1e-3 // every generated model's Adam
	grads := map[string][2][]float64{}
	gmax := 0.0
	for _, n := range b.Params() {
		ga, err1 := a.Grad(n)
		gb, err2 := b.Grad(n)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		grads[n] = [2][]float64{ga, gb}
		for _, v := range gb {
			gmax = math.Max(gmax, math.Abs(v))
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
			tol := 1e-4*math.Abs(g[1][i]) + 1e-5*gmax
			near0[i] = math.Abs(g[1][i]) <= tol
			d := math.Abs(g[0][i] - g[1][i])
			if r := (d - 1e-4*math.Abs(g[1][i])) / (1e-5 * gmax); r > worst {
				worst, at = r, fmt.Sprintf("%s[%d]", n, i)
			}
			if d > tol || math.IsNaN(g[0][i]) {
				t.Fatalf("%s: grad %s[%d] = %v with the GPU forms, %v without", what, n, i, g[0][i], g[1][i])
			}
		}
		pa, err1 := a.Param(n)
		pb, err2 := b.Param(n)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		for i := range pb {
			tol := 1e-7 + 1e-5*math.Abs(pb[i])
			if near0[i] {
				tol = 2 * lr
			}
			if d := math.Abs(pa[i] - pb[i]); d > tol || math.IsNaN(pa[i]) {
				t.Fatalf("%s: param %s[%d] = %v with the GPU forms, %v without", what, n, i, pa[i], pb[i])
			}
		}
	}
}
