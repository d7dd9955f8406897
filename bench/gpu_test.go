//go:build cuda

package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cuda"
)

// TestGPU is the GPU benchmark mode, for a machine with a device:
//
//	go test -tags cuda ./bench -run TestGPU -v -args -bench [-model convnet] [-steps 30]
//
// For each benchmark model it prints the fused and unfused training steps'
// median wall time, then every kernel's and GEMM's GPU time (CUDA events)
// and achieved bandwidth (the plan's bytes per launch over that time)
// against the device's peak, and the same step in PyTorch on the same GPU
// when PyTorch has CUDA.
func TestGPU(t *testing.T) {
	dev, peak := openGPU(t, "TestGPU")
	for _, c := range cases {
		if *only != "" && c.name != *only {
			continue
		}
		x, y := input(t, c)
		t0 := time.Now()
		m, err := c.fused(dev, c.batch)
		if err != nil {
			t.Fatal(err)
		}
		open := time.Since(t0)
		t0 = time.Now()
		if _, err := m.Step(x, y); err != nil {
			t.Fatal(err)
		}
		first := time.Since(t0)
		u, err := c.unfused(dev, c.batch)
		if err != nil {
			t.Fatal(err)
		}
		// Step reads the loss back, so each timed step ends synchronised.
		step, ustep := timeSteps(t, m, x, y), timeSteps(t, u, x, y)
		closeModel(t, u)
		pstep, perr := timePipelined(m, x, y)
		fmt.Printf("\n%s, median of %d steps:\n", c.describe, *steps)
		fmt.Printf("  ngen fused   %8.3f ms\n  ngen unfused %8.3f ms\n", ms(step), ms(ustep))
		if perr != nil {
			fmt.Printf("  ngen fused, pipelined: not measured: %v\n", perr)
		} else {
			fmt.Printf("  ngen fused, pipelined %8.3f ms (the mean of %d steps from a flush to a flush: each step's status read a step late, inputs on the copy stream)\n", ms(pstep), *steps)
		}
		coldStart(open, first)
		rows, err := profileGPU(dev, m, x, y)
		if err != nil {
			t.Fatal(err)
		}
		closeModel(t, m)
		torch, err := torchGPU(c)
		if err != nil {
			fmt.Printf("  PyTorch on the GPU: not measured: %v\n", err)
		} else {
			fmt.Printf("  PyTorch      %8.3f ms (%s, same GPU); ngen fused/PyTorch %.2fx\n", torch.Median, torch.Torch, ms(step)/torch.Median)
		}
		fmt.Println("  fused step, per launch (GPU time from CUDA events):")
		if err := writeRows(os.Stdout, rows, peak, step); err != nil {
			t.Fatal(err)
		}
	}
}

// timePipelined is the mean time of a step of m in a run of pipelined
// steps (runtime.Session.SetPipelined), from one Flush to the next, after
// warm-up; it turns pipelining off again. An error is the measurement's
// alone (pipelined steps have not run on a GPU before): the benchmark
// goes on with the synchronous steps.
func timePipelined(m stepper, x []float32, y []int32) (d time.Duration, err error) {
	s := m.(interface{ Session() *runtime.Session }).Session()
	if err := s.SetPipelined(true); err != nil {
		return 0, err
	}
	defer func() {
		if e := s.SetPipelined(false); err == nil {
			err = e
		}
	}()
	for range 5 {
		if _, err := m.Step(x, y); err != nil {
			return 0, err
		}
	}
	if err := s.Flush(); err != nil {
		return 0, err
	}
	start := time.Now()
	for range *steps {
		if _, err := m.Step(x, y); err != nil {
			return 0, err
		}
	}
	if err := s.Flush(); err != nil {
		return 0, err
	}
	return time.Since(start) / time.Duration(*steps), nil
}

// openGPU opens the GPU for benchmark test name, or skips it without
// -bench or a device; it prints the device, its peak memory bandwidth and
// the host, and closes the device when the test ends.
func openGPU(t *testing.T, name string) (*cuda.Device, float64) {
	t.Helper()
	if !*run {
		t.Skipf("benchmark: go test -tags cuda ./bench -run %s -v -args -bench", name)
	}
	if err := cuda.Available(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	dev, err := cuda.New(cuda.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	peak, err := dev.PeakBandwidth()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("device: %s, peak memory bandwidth %.0f GB/s (memory clock × bus width × 2)\n", dev.Name(), peak/1e9)
	fmt.Printf("host: %s\n", machine())
	return dev, peak
}

// profileGPU runs *steps training steps with the session's profile (for
// each step's bytes and FLOPs) and the device's event timing both on.
func profileGPU(dev *cuda.Device, m stepper, x []float32, y []int32) ([]kernelRow, error) {
	s := m.(interface{ Session() *runtime.Session }).Session()
	return profileSession(dev, s, func() error { _, err := m.Step(x, y); return err })
}

// profileSession is profileGPU for any step of the session s.
func profileSession(dev *cuda.Device, s *runtime.Session, step func() error) ([]kernelRow, error) {
	s.SetProfiling(true)
	defer s.SetProfiling(false)
	if err := dev.SetEventTiming(true); err != nil {
		return nil, err
	}
	defer dev.SetEventTiming(false)
	for i := 0; i < *steps; i++ {
		if err := step(); err != nil {
			return nil, err
		}
	}
	lts, err := dev.EventTimes()
	if err != nil {
		return nil, err
	}
	names := make([]string, len(lts))
	times := make([]time.Duration, len(lts))
	for i, lt := range lts {
		names[i], times[i] = lt.Name, lt.Time
	}
	return eventRows(s.Profile(), names, times)
}

func closeModel(t *testing.T, m stepper) {
	if c, ok := m.(interface{ Close() error }); ok {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}

// torchResult is what torch_step.py prints that the report uses.
type torchResult struct {
	Median float64 `json:"ms_median"`
	Torch  string  `json:"torch"`
	GPU    string  `json:"gpu"`
}

// gpuPython is the Python that has PyTorch with CUDA: $NGEN_PYTHON, else
// Debian's /usr/bin/python3 (whose PyTorch is CPU-only, so the GPU column
// then reports why it is missing).
func gpuPython() string {
	if p := os.Getenv("NGEN_PYTHON"); p != "" {
		return p
	}
	return "/usr/bin/python3"
}

// torchGPU times the same step in PyTorch on the GPU.
func torchGPU(c benchCase) (torchResult, error) {
	var tr torchResult
	args := append([]string{"torch_step.py", "--device", "cuda", "--batch", fmt.Sprint(c.batch),
		"--steps", fmt.Sprint(*steps), "--warmup", "5"}, c.peerArgs()...)
	cmd := exec.Command(gpuPython(), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 { // no CUDA in this PyTorch: a reason, not a failure
			return tr, errors.New(string(bytes.TrimSpace(stderr.Bytes())))
		}
		return tr, fmt.Errorf("torch_step.py: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	if err := json.Unmarshal(out, &tr); err != nil || tr.Median == 0 {
		return tr, fmt.Errorf("torch output %q: %v", out, err)
	}
	if tr.GPU != "" {
		tr.Torch += " on " + tr.GPU
	}
	return tr, nil
}

// coldStart prints ngen's start-up beside the step medians: opening the
// model (loading the module, allocating and initialising the arena) and
// its first step (which captures the CUDA graph), neither in the median.
func coldStart(open, first time.Duration) {
	fmt.Printf("  ngen cold start: open %.1f ms (module load, arena, init), first step %.1f ms (graph capture)\n", ms(open), ms(first))
}
