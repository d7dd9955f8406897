package runtime_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/ngen-ml/ngen/generated/convnet_bn"
	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/safetensors"
)

// Determinism (issue 27, README "Determinism"): the same seed, thread
// count and device give bit-identical parameters after N steps, in one
// process or another, with the step run call by call or deferred and
// issued as one graph (the CPU stand-in for a CUDA graph,
// graph_test.go's deferring device). The thread count decides how GEMMs
// are split, and a batch summed into one product (a convolution's
// weight gradient) is summed in per-thread partials: across thread counts
// the parameters agree to a bound, not bit for bit.

// trainerEnv makes the test binary train a model and write its
// checkpoint (TestDeterministicAcrossProcesses's child):
// "model,threads,steps,path".
const trainerEnv = "NGEN_TEST_TRAINER"

// detSteps trains model ("mlp" with dropout, or "convnet_bn") from seed 1
// for steps steps of batch 16 on dev and returns its checkpoint.
func detSteps(dev runtime.Device, model string, steps int) ([]byte, error) {
	rng := rand.New(rand.NewPCG(11, 12))
	var step func(x []float32, y []int32) (float32, error)
	var save func(*bytes.Buffer) error
	var closer func() error
	switch model {
	case "mlp":
		m, err := mlp.New(dev, mlp.Options{Batch: 16, Seed: 1})
		if err != nil {
			return nil, err
		}
		step, closer = m.Step, m.Close
		save = func(b *bytes.Buffer) error { return m.Save(b) }
	case "convnet_bn":
		m, err := convnet_bn.New(dev, convnet_bn.Options{Batch: 16, Seed: 1})
		if err != nil {
			return nil, err
		}
		step, closer = m.Step, m.Close
		save = func(b *bytes.Buffer) error { return m.Save(b) }
	default:
		return nil, fmt.Errorf("no model %q", model)
	}
	defer closer()
	x, y := make([]float32, 16*784), make([]int32, 16)
	for i := 0; i < steps; i++ {
		for k := range x {
			x[k] = rng.Float32()
		}
		for k := range y {
			y[k] = int32(rng.IntN(10))
		}
		if _, err := step(x, y); err != nil {
			return nil, err
		}
	}
	var b bytes.Buffer
	err := save(&b)
	return b.Bytes(), err
}

// trainer is the child's side: train and write the checkpoint.
func trainer(spec string) error {
	parts := bytes.Split([]byte(spec), []byte(","))
	if len(parts) != 4 {
		return fmt.Errorf("bad spec %q", spec)
	}
	model, path := string(parts[0]), string(parts[3])
	threads, _ := strconv.Atoi(string(parts[1]))
	steps, _ := strconv.Atoi(string(parts[2]))
	dev, err := cpu.New(cpu.Options{Threads: threads})
	if err != nil {
		return err
	}
	defer dev.Close()
	b, err := detSteps(dev, model, steps)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// TestDeterministicAcrossProcesses: per model and thread count, two child
// processes and this one train 30 steps and write byte-identical
// checkpoints; so does a run whose steps are issued as graphs. Across
// thread counts 1, 2 and 3 the parameters agree within Adam's bound below
// (TestThreadCountGradients bounds one step's difference).
func TestDeterministicAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("trains the MLP and the ConvNet 30 steps in 14 processes: about 20 s")
	}
	const steps = 30
	dir := t.TempDir()
	for _, model := range []string{"mlp", "convnet_bn"} {
		byThreads := map[int][]byte{}
		for _, threads := range []int{1, 2, 3} {
			var runs [][]byte
			for run := 0; run < 2; run++ {
				path := filepath.Join(dir, fmt.Sprintf("%s-%d-%d", model, threads, run))
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%d,%s", trainerEnv, model, threads, steps, path))
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("%s, %d threads: %v\n%s", model, threads, err, out)
				}
				runs = append(runs, mustRead(path))
			}
			dev, err := cpu.New(cpu.Options{Threads: threads})
			if err != nil {
				t.Fatal(err)
			}
			here, err := detSteps(dev, model, steps)
			if err != nil {
				t.Fatal(err)
			}
			graphed, err := detSteps(&deferring{Device: dev}, model, steps)
			if err != nil {
				t.Fatal(err)
			}
			dev.Close()
			for i, b := range [][]byte{runs[1], here, graphed} {
				if !bytes.Equal(b, runs[0]) {
					t.Fatalf("%s, %d threads: run %d (%s) differs from the first process's checkpoint", model, threads, i+1,
						[]string{"a second process", "in process", "graphed"}[i])
				}
			}
			byThreads[threads] = runs[0]
		}
		for _, threads := range []int{2, 3} {
			rel, abs := paramDiff(t, byThreads[1], byThreads[threads])
			// Adam moves a weight by at most about lr·(1-β1)/sqrt(1-β2)
			// = 3.2·lr a step, and normalises away a gradient's scale, so
			// a rounding-level difference in a small gradient can become a
			// step of lr in another direction: two runs stay within
			// 2·3.2·lr·steps of each other. Measured after 30 steps: about
			// 1e-5 for the MLP, 1e-2 for the ConvNet with batch norm.
			bound := 2 * 3.2 * 1e-3 * steps
			t.Logf("%s: %d threads against 1: largest parameter difference %.3g (%.3g of the largest parameter) after %d steps", model, threads, abs, rel, steps)
			if abs > bound {
				t.Errorf("%s: %d threads against 1 differ by %.3g, over Adam's bound %.3g", model, threads, abs, bound)
			}
		}
	}
}

// TestThreadCountGradients: the thread count changes only the summation
// order of GEMMs split between threads (per-thread partials of a batch
// summed into one product), so one step's gradients from the same weights
// agree to float32 rounding: within 1e-5 of the largest gradient.
func TestThreadCountGradients(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	x, y := make([]float32, 16*784), make([]int32, 16)
	for k := range x {
		x[k] = rng.Float32()
	}
	for k := range y {
		y[k] = int32(rng.IntN(10))
	}
	type model interface {
		Step(x []float32, y []int32) (float32, error)
		Params() []string
		Grad(name string) ([]float32, error)
		Close() error
	}
	grads := func(name string, threads int) map[string][]float32 {
		dev, err := cpu.New(cpu.Options{Threads: threads})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		var m model
		if name == "mlp" {
			m, err = mlp.New(dev, mlp.Options{Batch: 16, Seed: 1})
		} else {
			m, err = convnet_bn.New(dev, convnet_bn.Options{Batch: 16, Seed: 1})
		}
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if _, err := m.Step(x, y); err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for _, p := range m.Params() {
			if out[p], err = m.Grad(p); err != nil {
				t.Fatal(err)
			}
		}
		return out
	}
	for _, name := range []string{"mlp", "convnet_bn"} {
		one := grads(name, 1)
		for _, threads := range []int{2, 3} {
			other := grads(name, threads)
			worst, biggest := 0.0, 0.0
			for p, g := range one {
				for i, v := range g {
					worst = max(worst, math.Abs(float64(v-other[p][i])))
					biggest = max(biggest, math.Abs(float64(v)))
				}
			}
			t.Logf("%s: %d threads against 1: first-step gradients differ by %.3g of the largest", name, threads, worst/biggest)
			// float32 sums of up to 16·K terms in another order.
			if worst > 1e-5*biggest {
				t.Errorf("%s: %d threads against 1: gradients differ by %.3g of the largest, over 1e-5", name, threads, worst/biggest)
			}
		}
	}
}

// paramDiff is the largest difference between two checkpoints' parameters
// (optimizer state left out), absolute and relative to the largest
// parameter.
func paramDiff(t *testing.T, a, b []byte) (rel, abs float64) {
	t.Helper()
	fa, err := safetensors.Parse(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := safetensors.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	biggest := 0.0
	for _, ta := range fa.Tensors {
		if ta.DType != "F32" || bytes.HasPrefix([]byte(ta.Name), []byte(runtime.OptimizerPrefix)) {
			continue
		}
		tb, ok := fb.Lookup(ta.Name)
		if !ok {
			t.Fatalf("%s missing", ta.Name)
		}
		for i := 0; i+4 <= len(ta.Data); i += 4 {
			x := float64(math.Float32frombits(binary.LittleEndian.Uint32(ta.Data[i:])))
			y := float64(math.Float32frombits(binary.LittleEndian.Uint32(tb.Data[i:])))
			abs = max(abs, math.Abs(x-y))
			biggest = max(biggest, math.Abs(x))
		}
	}
	return abs / biggest, abs
}
