// Package bench measures ngen against PyTorch in one run: the same model,
// batch, optimizer and thread count, and prints the ratio. It is a
// benchmark, not a timed test:
//
//	go test ./bench -run TestVsTorch -v -args -bench -threads 1 [-model mlpbench]
package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"

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
	"github.com/ngen-ml/ngen/runtime/data"
)

var (
	threads = flag.Int("threads", 1, "threads for both ngen and PyTorch")
	steps   = flag.Int("steps", 30, "timed steps")
	run     = flag.Bool("bench", false, "run the comparison (off in the normal test suite)")
	only    = flag.String("model", "", "compare only this model (default: all)")
)

type stepper interface {
	Step(x []float32, y []int32) (float32, error)
}

func median(ts []time.Duration) time.Duration {
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts[len(ts)/2]
}

func timeSteps(t *testing.T, m stepper, x []float32, y []int32) time.Duration {
	for i := 0; i < 5; i++ {
		if _, err := m.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	var ts []time.Duration
	for i := 0; i < *steps; i++ {
		start := time.Now()
		if _, err := m.Step(x, y); err != nil {
			t.Fatal(err)
		}
		ts = append(ts, time.Since(start))
	}
	return median(ts)
}

// benchCase is one model compared: its generated packages and its peer.
type benchCase struct {
	name      string
	batch     int
	in        int // input elements per sample
	fused     func(dev runtime.Device, batch int) (stepper, error)
	unfused   func(dev runtime.Device, batch int) (stepper, error)
	torchArgs []string // torch_step.py arguments naming the same model
	describe  string
	// images: step on the first batch of Fashion-MNIST's training set
	// (both sides), not on random inputs.
	images bool
}

var cases = []benchCase{
	{
		name: "mlpbench", batch: 128, in: 1024,
		describe: "MLP 1024-2048-512-10, batch 128, Adam",
		fused: func(dev runtime.Device, b int) (stepper, error) {
			return mlpbench.New(dev, mlpbench.Options{Batch: b, Seed: 1})
		},
		unfused: func(dev runtime.Device, b int) (stepper, error) {
			return mlpbench_unfused.New(dev, mlpbench_unfused.Options{Batch: b, Seed: 1})
		},
		torchArgs: []string{"--model", "mlp", "--layers", "1024,2048,512,10"},
	},
	{
		// The seed MLP trains in training mode: its dropout masks are drawn
		// every step, in ngen and in PyTorch.
		name: "mlp", batch: 64, in: 784, images: true,
		describe: "seed MLP 784-512-256-10, dropout 0.2, batch 64, Adam",
		fused: func(dev runtime.Device, b int) (stepper, error) {
			return mlp.New(dev, mlp.Options{Batch: b, Seed: 1})
		},
		unfused: func(dev runtime.Device, b int) (stepper, error) {
			return mlp_unfused.New(dev, mlp_unfused.Options{Batch: b, Seed: 1})
		},
		torchArgs: []string{"--model", "mlp", "--layers", "784,512,256,10", "--dropout", "0.2"},
	},
	{
		name: "convnet", batch: 64, in: 784,
		describe: "ConvNet (conv32-pool-conv64-pool-fc128-fc10), batch 64, Adam",
		fused: func(dev runtime.Device, b int) (stepper, error) {
			return convnet.New(dev, convnet.Options{Batch: b, Seed: 1})
		},
		unfused: func(dev runtime.Device, b int) (stepper, error) {
			return convnet_unfused.New(dev, convnet_unfused.Options{Batch: b, Seed: 1})
		},
		torchArgs: []string{"--model", "convnet"}, images: true,
	},
	{
		name: "convnet_bn", batch: 64, in: 784,
		describe: "ConvNet with BatchNorm2d, batch 64, Adam",
		fused: func(dev runtime.Device, b int) (stepper, error) {
			return convnet_bn.New(dev, convnet_bn.Options{Batch: b, Seed: 1})
		},
		unfused: func(dev runtime.Device, b int) (stepper, error) {
			return convnet_bn_unfused.New(dev, convnet_bn_unfused.Options{Batch: b, Seed: 1})
		},
		torchArgs: []string{"--model", "convnet_bn"}, images: true,
	},
}

// TestVsTorch times one training step of each benchmark model in ngen
// (fused and unfused) and in PyTorch, in one run with the same thread
// count, and prints the ratios.
func TestVsTorch(t *testing.T) {
	if !*run {
		t.Skip("benchmark: go test ./bench -run TestVsTorch -v -args -bench -threads N")
	}
	os.Setenv("OPENBLAS_NUM_THREADS", fmt.Sprint(*threads))
	dev, err := cpu.New(cpu.Options{Threads: *threads})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		if *only != "" && c.name != *only {
			continue
		}
		x, y := input(t, c)
		fused, err := c.fused(dev, c.batch)
		if err != nil {
			t.Fatal(err)
		}
		unfused, err := c.unfused(dev, c.batch)
		if err != nil {
			t.Fatal(err)
		}
		tf := timeSteps(t, fused, x, y)
		if *profile {
			sm, ok := fused.(interface{ Session() *runtime.Session })
			if !ok {
				t.Fatalf("%s: no Session to profile", c.name)
			}
			profileSteps(t, c.name, sm.Session(), func() error { _, err := fused.Step(x, y); return err })
		}
		tu := timeSteps(t, unfused, x, y)
		tr, alloc := runPeer(t, c.args(*steps, 5))
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		if i == 0 || *only != "" {
			fmt.Printf("torch %s (%s)\n", tr.Torch, tr.BLAS)
		}
		fmt.Printf("%s, median of %d steps:\n", c.describe, *steps)
		fmt.Printf("  machine: %s, %d thread(s)\n", machine(), *threads)
		fmt.Printf("  ngen fused   %7.2f ms  ratio %.2fx PyTorch's time (%.2fx its throughput)\n", ms(tf), ms(tf)/tr.Median, tr.Median/ms(tf))
		fmt.Printf("  ngen unfused %7.2f ms  ratio %.2fx PyTorch's time (%.2fx its throughput)\n", ms(tu), ms(tu)/tr.Median, tr.Median/ms(tu))
		fmt.Printf("  PyTorch      %7.2f ms  (glibc malloc %s)\n", tr.Median, alloc)
	}
}

// profileSteps prints the per-kernel profile of *steps more calls of
// step, a training step of session s's model.
func profileSteps(t *testing.T, name string, s *runtime.Session, step func() error) {
	s.SetProfiling(true)
	defer s.SetProfiling(false)
	for i := 0; i < *steps; i++ {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Printf("%s fused, profile of %d steps:\n", name, *steps)
	if err := runtime.WriteProfile(os.Stdout, s.Profile()); err != nil {
		t.Fatal(err)
	}
}

// peerResult is what torch_step.py prints.
type peerResult struct {
	Median float64 `json:"ms_median"`
	Torch  string  `json:"torch"`
	BLAS   string  `json:"blas"`
	CPU    string  `json:"cpu"`
}

// peerAllocs are the malloc settings the peer runs under; the benchmark
// keeps the faster. PyTorch frees and reallocates its large tensors every
// step: on this VM, memory that glibc hands back to the kernel is slow to
// fault in again (free page reporting), which made PyTorch's MLP step five
// times slower by default. Keeping freed memory mends the MLP but slowed
// the ConvNets, so neither setting alone gives PyTorch its best.
var peerAllocs = []struct {
	name string
	env  []string
}{
	{"default", nil},
	{"keeping freed memory", []string{"MALLOC_MMAP_THRESHOLD_=4294967296", "MALLOC_TRIM_THRESHOLD_=4294967296"}},
}

// runPeer runs torch_step.py under each of peerAllocs and returns the
// faster result and the setting that gave it.
func runPeer(t *testing.T, args []string) (peerResult, string) {
	t.Helper()
	var best peerResult
	var bestAlloc string
	for _, a := range peerAllocs {
		cmd := exec.Command("/usr/bin/python3", args...)
		cmd.Env = append(os.Environ(), a.env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("torch: %v", err)
		}
		var tr peerResult
		if err := json.Unmarshal(out, &tr); err != nil || tr.Median == 0 {
			t.Fatalf("torch output %q: %v", out, err)
		}
		if bestAlloc == "" || tr.Median < best.Median {
			best, bestAlloc = tr, a.name
		}
	}
	return best, bestAlloc
}

// peerArgs are torch_step.py's arguments for c's model and input.
func (c benchCase) peerArgs() []string {
	a := append([]string(nil), c.torchArgs...)
	if c.images {
		a = append(a, "--data", data.DefaultFashionMNISTDir)
	}
	return a
}

// input is c's batch: the first Fashion-MNIST training images, or fixed
// random inputs.
func input(t *testing.T, c benchCase) ([]float32, []int32) {
	if c.images {
		ds, err := data.LoadFashionMNIST(data.DefaultFashionMNISTDir, true)
		if err != nil {
			t.Fatal(err)
		}
		return ds.X[:c.batch*c.in], ds.Y[:c.batch]
	}
	rng := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, c.batch*c.in)
	y := make([]int32, c.batch)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		y[i] = int32(rng.IntN(10))
	}
	return x, y
}
