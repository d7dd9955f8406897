//go:build cuda

package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/models/builds"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cuda"
)

// TestGPUAMP is the GPU benchmark of mixed precision (issue 25's GPU
// target), for a machine with a device:
//
//	go test -tags cuda ./bench -run TestGPUAMP -v -args -bench [-model gpt] [-steps 30]
//
// For the seed MLP and ConvNet (batch 64) and the gpt and the
// TransformerLM (batch 16) it times the fused f32 step (the generated
// package, TF32 off) and the bf16 and fp16 builds, compiled here from the
// model's declaration as CUDA C for the backend's NVRTC (models/builds),
// then PyTorch's eager step on the same GPU in f32 and under
// torch.autocast (fp16 with a GradScaler). It prints each step's median,
// the 16-bit step against ngen's f32 one (the target: at most 0.6 for
// the Transformers) and against PyTorch's autocast step (at most 1.0),
// the time to open a build (NVRTC compile included) apart, and the bf16
// step's kernels by GPU time.
func TestGPUAMP(t *testing.T) {
	dev, peak := openGPU(t, "TestGPUAMP")
	all := ampCases(t)
	for _, c := range all {
		if *only != "" && c.pkg != *only {
			continue
		}
		fmt.Printf("\n%s, median of %d steps:\n", c.describe, *steps)
		f32, err := runtime.Registered(c.pkg)
		if err != nil {
			t.Fatal(err)
		}
		base, _, _, err := gpuAMPStep(dev, f32, c.in, c.batch, false)
		if err != nil {
			t.Fatalf("%s f32: %v", c.pkg, err)
		}
		fmt.Printf("  ngen f32       %8.3f ms\n", ms(base))
		torch := map[string]float64{}
		for _, amp := range []string{"off", "bf16", "fp16"} {
			r, err := torchGPUAMP(c.batch, c.torch, amp)
			if err != nil {
				fmt.Printf("  PyTorch %-5s  not measured: %v\n", amp, err)
				continue
			}
			torch[amp] = r.Median
			fmt.Printf("  PyTorch %-5s  %8.3f ms (%s, eager%s)\n", amp, r.Median, r.Torch, map[bool]string{true: ", torch.autocast", false: ""}[amp != "off"])
		}
		for _, amp := range []string{"bf16", "fp16"} {
			t0 := time.Now()
			g, err := builds.Register(c.pkg, amp, builds.GPU)
			if err != nil {
				t.Fatal(err)
			}
			compile := time.Since(t0)
			step, open, rows, err := gpuAMPStep(dev, g, c.in, c.batch, amp == "bf16")
			if err != nil {
				fmt.Printf("  ngen %s: failed: %v\n", amp, err)
				continue
			}
			vs := ""
			if p, ok := torch[amp]; ok {
				vs = fmt.Sprintf(", %.2fx PyTorch's autocast step", ms(step)/p)
			}
			fmt.Printf("  ngen %-5s     %8.3f ms: %.2fx ngen's f32 step%s (compiler %.0f ms; open, NVRTC included, %.0f ms)\n", amp, ms(step), float64(step)/float64(base), vs, ms(compile), ms(open))
			if rows != nil {
				fmt.Printf("  the %s step, per launch (GPU time from CUDA events):\n", amp)
				if err := writeRows(os.Stdout, rows, peak, step); err != nil {
					t.Fatal(err)
				}
			}
		}
		// The Transformers' bf16 attention on CUDA cores (ngen build
		// -attention-form cuda-cores), beside the tensor-core form above:
		// the measurement that decides the default per shape.
		if c.pkg == "gpt" || c.pkg == "transformer" {
			g, err := builds.RegisterAttentionForm(c.pkg, "bf16", ops.TensorNever)
			if err != nil {
				t.Fatal(err)
			}
			step, _, rows, err := gpuAMPStep(dev, g, c.in, c.batch, true)
			if err != nil {
				fmt.Printf("  ngen bf16, attention on CUDA cores: failed: %v\n", err)
				continue
			}
			fmt.Printf("  ngen bf16, attention on CUDA cores %8.3f ms: %.2fx ngen's f32 step\n", ms(step), float64(step)/float64(base))
			if err := writeRows(os.Stdout, rows, peak, step); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// gpuAMPStep opens g's model at batch on dev, steps once (graph capture),
// and returns the median of *steps steps and the time to open it; with
// profile, also the step's kernels by GPU time.
func gpuAMPStep(dev *cuda.Device, g *runtime.Generated, in runtime.Inputs, batch int, profile bool) (step, open time.Duration, rows []kernelRow, err error) {
	t0 := time.Now()
	m, err := g.New(dev, runtime.SessionOptions{MaxBatch: batch, Seed: 1})
	if err != nil {
		return 0, 0, nil, err
	}
	defer m.Close()
	open = time.Since(t0)
	if _, err := m.Step(in); err != nil {
		return 0, 0, nil, err
	}
	var ts []time.Duration
	for i := 0; i < *steps; i++ {
		t0 := time.Now()
		if _, err := m.Step(in); err != nil {
			return 0, 0, nil, err
		}
		ts = append(ts, time.Since(t0))
	}
	step = median(ts)
	if profile {
		rows, err = profileSession(dev, m.Session(), func() error { _, err := m.Step(in); return err })
	}
	return step, open, rows, err
}

// torchGPUAMP times PyTorch's step on the GPU under autocast in amp ("off"
// for f32).
func torchGPUAMP(batch int, model []string, amp string) (torchResult, error) {
	var tr torchResult
	args := append([]string{"torch_step.py", "--device", "cuda", "--batch", fmt.Sprint(batch),
		"--steps", fmt.Sprint(*steps), "--warmup", "5", "--amp", amp}, model...)
	cmd := exec.Command(gpuPython(), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
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
