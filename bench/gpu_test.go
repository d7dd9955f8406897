//go:build cuda

package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"testing"
	"text/tabwriter"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cuda"
)

// TestGPU is the GPU benchmark mode, for a machine with a device:
//
//	go test -tags cuda ./bench -run TestGPU -v -args -bench [-model convnet]
//
// For each benchmark model it prints the fused training step's median time,
// then every kernel's and GEMM's average time and achieved bandwidth (the
// plan's bytes moved per launch over its time) against the device's peak,
// and the same step in PyTorch on the same GPU when PyTorch has CUDA.
func TestGPU(t *testing.T) {
	if !*run {
		t.Skip("benchmark: go test -tags cuda ./bench -run TestGPU -v -args -bench")
	}
	dev, err := cuda.New(cuda.Options{})
	if err != nil {
		t.Skipf("no GPU: %v", err)
	}
	defer dev.Close()
	peak, err := dev.PeakBandwidth()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("device: %s, peak memory bandwidth %.0f GB/s\n", dev.Name(), peak/1e9)
	for _, c := range cases {
		if *only != "" && c.name != *only {
			continue
		}
		x, y := input(c)
		m, err := c.fused(dev, c.batch)
		if err != nil {
			t.Fatal(err)
		}
		step := timeSteps(t, m, x, y) // Step reads the loss back: each step is synchronised
		fmt.Printf("\n%s: ngen fused step %.3f ms (median of %d)\n", c.describe, float64(step.Microseconds())/1000, *steps)
		s := m.(interface{ Session() *runtime.Session }).Session()
		s.SetProfiling(true)
		for i := 0; i < *steps; i++ {
			if _, err := m.Step(x, y); err != nil {
				t.Fatal(err)
			}
		}
		printKernels(s.Profile(), peak)
		s.SetProfiling(false)
		torch, err := torchGPU(c)
		switch {
		case err != nil:
			fmt.Printf("  PyTorch on the GPU: not measured: %v\n", err)
		default:
			fmt.Printf("  PyTorch on the same GPU: %.3f ms; ngen/PyTorch %.2fx\n", torch, float64(step.Microseconds())/1000/torch)
		}
	}
}

// printKernels prints the training step's launches, slowest first, with
// the share of the device's peak bandwidth each achieves.
func printKernels(ts []runtime.StepTime, peak float64) {
	sort.Slice(ts, func(i, j int) bool { return ts[i].Total > ts[j].Total })
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  kernel\tavg µs\tGB/s\t% of peak\tGFLOP/s\t")
	for _, k := range ts {
		if k.Func != "step" {
			continue
		}
		sec := k.Total.Seconds()
		avg := sec / float64(max(k.Calls, 1))
		gbs := float64(k.Bytes) / sec
		fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\t%.1f%%\t%.1f\t\n", k.Name, avg*1e6, gbs/1e9, 100*gbs/peak, float64(k.Flops)/sec/1e9)
	}
	tw.Flush()
}

// torchGPU times the same step in PyTorch on the GPU, in milliseconds.
func torchGPU(c benchCase) (float64, error) {
	args := append([]string{"torch_step.py", "--device", "cuda", "--batch", fmt.Sprint(c.batch),
		"--steps", fmt.Sprint(*steps), "--warmup", "5"}, c.torchArgs...)
	cmd := exec.Command("/usr/bin/python3", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			return 0, errors.New(string(bytes.TrimSpace(stderr.Bytes())))
		}
		return 0, fmt.Errorf("torch_step.py: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var tr struct {
		Median float64 `json:"ms_median"`
	}
	if err := json.Unmarshal(out, &tr); err != nil || tr.Median == 0 {
		return 0, fmt.Errorf("torch output %q: %v", out, err)
	}
	return tr.Median, nil
}
