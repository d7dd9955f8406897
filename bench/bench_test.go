// Package bench measures ngen against PyTorch in one run: the same model,
// batch, optimizer and thread count, and prints the ratio. It is a
// benchmark, not a timed test:
//
//	go test ./bench -run TestVsTorch -v -args -threads 1
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

	"github.com/ngen-ml/ngen/generated/mlpbench"
	"github.com/ngen-ml/ngen/generated/mlpbench_unfused"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

var (
	threads = flag.Int("threads", 1, "threads for both ngen and PyTorch")
	steps   = flag.Int("steps", 30, "timed steps")
	run     = flag.Bool("bench", false, "run the comparison (off in the normal test suite)")
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

// TestVsTorch times one training step of the seed benchmark MLP
// (1024-2048-512-10, batch 128, Adam) in ngen (fused and unfused) and in
// PyTorch, and prints the ratios.
func TestVsTorch(t *testing.T) {
	if !*run {
		t.Skip("benchmark: go test ./bench -run TestVsTorch -v -args -bench -threads N")
	}
	os.Setenv("OPENBLAS_NUM_THREADS", fmt.Sprint(*threads))
	dev, err := cpu.New(cpu.Options{Threads: *threads})
	if err != nil {
		t.Fatal(err)
	}
	const B = 128
	rng := rand.New(rand.NewPCG(1, 1))
	x := make([]float32, B*1024)
	y := make([]int32, B)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		y[i] = int32(rng.IntN(10))
	}
	fused, err := mlpbench.New(dev, mlpbench.Options{Batch: B, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	unfused, err := mlpbench_unfused.New(dev, mlpbench_unfused.Options{Batch: B, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	tf := timeSteps(t, fused, x, y)
	tu := timeSteps(t, unfused, x, y)
	out, err := exec.Command("/usr/bin/python3", "torch_mlp.py", "--threads", fmt.Sprint(*threads), "--batch", "128",
		"--steps", fmt.Sprint(*steps), "--warmup", "5", "--layers", "1024,2048,512,10").Output()
	if err != nil {
		t.Fatalf("torch: %v", err)
	}
	var tr struct {
		Median float64 `json:"median_ms"`
		Mean   float64 `json:"ms_per_step"`
		Torch  string  `json:"torch"`
		BLAS   string  `json:"blas"`
		CPU    string  `json:"cpu"`
	}
	if err := json.Unmarshal(out, &tr); err != nil {
		t.Fatalf("torch output %q: %v", out, err)
	}
	torch := tr.Median
	if torch == 0 {
		torch = tr.Mean
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Printf("machine: %s, %d thread(s); torch %s (%s)\n", tr.CPU, *threads, tr.Torch, tr.BLAS)
	fmt.Printf("MLP 1024-2048-512-10, batch 128, Adam, median of %d steps:\n", *steps)
	fmt.Printf("  ngen fused   %7.2f ms  ratio %.2fx PyTorch\n", ms(tf), ms(tf)/torch)
	fmt.Printf("  ngen unfused %7.2f ms  ratio %.2fx PyTorch\n", ms(tu), ms(tu)/torch)
	fmt.Printf("  PyTorch      %7.2f ms\n", torch)
}
