package codegen

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/dsl/eval"
	"github.com/ngen-ml/ngen/runtime"
)

// benchReports compiles the benchmark models (the MLP of bench, the
// ConvNets) at batch 128, fused and unfused, and reports each.
func benchReports(t *testing.T) map[string]*Report {
	t.Helper()
	out := map[string]*Report{}
	for _, file := range []string{"mlp", "convnet"} {
		models, err := eval.Models(filepath.Join("..", "models", file, "model.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range models {
			if m.Name != "mlpbench" && m.Name != "convnet" && m.Name != "convnet_bn" {
				continue
			}
			for _, fuse := range []bool{true, false} {
				p, err := compiler.Compile(m, compiler.Options{Fuse: fuse, RefBatch: 128})
				if err != nil {
					t.Fatal(err)
				}
				r, err := MakeReport(p)
				if err != nil {
					t.Fatal(err)
				}
				name := m.Name
				if !fuse {
					name += "_unfused"
				}
				out[name] = r
			}
		}
	}
	if len(out) != 6 {
		t.Fatalf("found %d benchmark reports, want 6", len(out))
	}
	return out
}

// TestGPUModel checks, at the benchmark shapes: no kernel that moves 1 MB
// or more leaves more than half of an H100's or A100's SMs idle (the
// reductions' GPU launch shapes); the ConvNets' steps issue at most 40
// device calls besides the transaction's guard, update check and single
// commit; and the modeled H100 step of the benchmark MLP and the
// ConvNet, fused, with CUDA graphs, spends at most 2.5× the roofline
// ideal in its kernels.
func TestGPUModel(t *testing.T) {
	reports := benchReports(t)
	for name, r := range reports {
		for _, gpu := range []string{"h100", "a100"} {
			for _, s := range r.SMStarved(gpu, 1<<20) {
				t.Errorf("%s on %s: %s moves %d bytes on %d blocks, fewer than half the %d SMs", name, gpu, s.Kernel, s.Bytes, s.Blocks, GPUs[gpu].SMs)
			}
		}
	}
	for _, name := range []string{"convnet", "convnet_bn"} {
		// The transaction (compiler/guard.go) costs one guard launch, one
		// update check and at most one commit launch, whatever the number
		// of state buffers, and the clock kernel one; the 40 calls budget
		// the rest of the step.
		var guards, checks, commits, clocks int
		for _, s := range reports[name].Steps {
			switch {
			case strings.HasPrefix(s.Kernel, "ngen_clock"):
				clocks++
			case strings.HasPrefix(s.Kernel, "ngen_guard"):
				guards++
			case strings.HasPrefix(s.Kernel, "ngen_update_check"):
				checks++
			case strings.HasPrefix(s.Kernel, "ngen_commit"):
				commits++
			}
		}
		if guards != 1 || checks > 1 || commits > 1 || clocks != 1 {
			t.Errorf("%s: %d guard, %d update-check, %d commit and %d clock launches per step, want 1, at most 1, at most 1 and 1", name, guards, checks, commits, clocks)
		}
		if n := reports[name].DeviceCalls - guards - checks - commits - clocks; n > 40 {
			t.Errorf("%s: %d device calls per step besides the transaction's, want <= 40", name, n)
		}
	}
	for _, name := range []string{"mlpbench", "convnet"} {
		r := reports[name]
		if err := r.ModelGPU("h100", GPUOptions{Graphs: true}); err != nil {
			t.Fatal(err)
		}
		// The kernels' own modeled time against the roofline: the host's
		// share and the per-call floor are the same for any kernel shape,
		// so they are left out of this check of the launch shapes.
		ratio := r.GPU.KernelUs / r.GPUIdealUs
		t.Logf("%s on H100: modeled %.1f µs (kernels %.1f µs), ideal %.1f µs, kernels/ideal %.2f, %d device calls", name, r.GPUModelUs, r.GPU.KernelUs, r.GPUIdealUs, ratio, r.DeviceCalls)
		// 2.5×: the model charges every FP32 GEMM cuBLAS's sustained
		// share of the peak (gemmEfficiency) and its short-K loss, which
		// the ideal does not (the ConvNet's conv1 GEMMs have K = 9).
		if ratio > 2.5 {
			t.Errorf("%s: modeled H100 kernels %.1f µs are %.2f× the roofline ideal %.1f µs, want <= 2.5×", name, r.GPU.KernelUs, ratio, r.GPUIdealUs)
		}
	}
}

// TestModelGPUArithmetic checks the model on hand-made rows: a launch
// moving 3.35 MB on H100 on enough threads takes 1 µs; on 1000 threads
// it moves threadBytesPerSec per thread; a recurrence takes
// T × (scanStepUs + its matrix at scanBlockBytesPerSec); each call adds
// its floor (and an eager call its host cost); the host's part adds
// hostStepUs and the inputs' copies; graphs add one graph launch;
// pipelined, the step costs the longer of the host's part and the rest.
// It also checks the JSON keys.
func TestModelGPUArithmetic(t *testing.T) {
	r := &Report{InputBytes: 1e6, Steps: []StepRow{
		{Kind: "launch", Kernel: "a", Bytes: 3_350_000, Calls: 1, Blocks: 2048, Threads: 2048 * 256},
		{Kind: "launch", Kernel: "b", Bytes: 12_700, Calls: 1, Blocks: 8, Threads: 1000},
		{Kind: "launch", Kernel: "scan", Calls: 1, Blocks: 32, Threads: 32 * 256, TimeSteps: 10, RecurBytes: 20_500},
		{Kind: "memset", Calls: 1},
	}, gemmCalls: nil}
	r.gemmCalls = make([]runtime.GemmArgs, len(r.Steps))
	if err := r.ModelGPU("h100", GPUOptions{}); err != nil {
		t.Fatal(err)
	}
	host := hostStepUs + 1e6/hostCopyBytesPerSec*1e6
	kernels := 1 + 1 + 10*(scanStepUs+1)
	want := host + kernels + 4*(callFloorUs+eagerCallUs)
	if math.Abs(r.GPUModelUs-want) > 1e-6 || math.Abs(r.GPU.KernelUs-kernels) > 1e-6 {
		t.Fatalf("eager: model %v (kernels %v), want %v (kernels %v)", r.GPUModelUs, r.GPU.KernelUs, want, kernels)
	}
	if err := r.ModelGPU("h100", GPUOptions{Graphs: true}); err != nil {
		t.Fatal(err)
	}
	if want := host + kernels + 4*callFloorUs + graphLaunch; math.Abs(r.GPUModelUs-want) > 1e-6 {
		t.Fatalf("graphs: model %v, want %v", r.GPUModelUs, want)
	}
	// Pipelined, the host's part and the device's overlap: the longer.
	dev := kernels + 4*callFloorUs + graphLaunch
	if err := r.ModelGPU("h100", GPUOptions{Graphs: true, Pipelined: true}); err != nil {
		t.Fatal(err)
	}
	if want := max(host, dev); math.Abs(r.GPUModelUs-want) > 1e-6 || math.Abs(r.GPU.DeviceUs-dev) > 1e-6 {
		t.Fatalf("pipelined: model %v (device %v), want %v (device %v)", r.GPUModelUs, r.GPU.DeviceUs, want, dev)
	}
	if err := r.ModelGPU("v100", GPUOptions{}); err == nil {
		t.Error("an unknown GPU was accepted")
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(buf.Bytes(), &obj); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"device_calls", "gpu_model_us", "gpu_ideal_us"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("JSON report lacks %q", k)
		}
	}
}

// TestModelGPUHalfGemms checks that a GEMM with 16-bit operands is priced
// at the FP16/BF16 tensor-core peak (GPUSpec.Half), an f32 one at FP32's
// (or TF32's with the option) and an f64 one at FP64's, whatever -tf32
// says of the 16-bit one; that the summary counts the 16-bit rows and
// prints them; and that every mixed-precision seed model's report prices
// all its 16-bit GEMMs so, each faster than the same product in f32.
func TestModelGPUHalfGemms(t *testing.T) {
	const m, n, k = 4096, 4096, 4096
	flops := int64(2 * m * n * k)
	row := func(dt runtime.DType) (StepRow, runtime.GemmArgs) {
		return StepRow{Kind: "gemm", Bytes: int64((m*k + k*n + m*n) * dt.Size()), Flops: flops, Calls: 1},
			runtime.GemmArgs{DType: dt, M: m, N: n, K: k, LDA: k, LDB: n, LDC: n, Alpha: 1}
	}
	spec := GPUs["h100"]
	for _, tf32 := range []bool{false, true} {
		for _, c := range []struct {
			dt   runtime.DType
			peak float64
		}{
			{runtime.BF16, spec.Half}, {runtime.F16, spec.Half}, {runtime.F64, spec.FP64},
			{runtime.F32, map[bool]float64{false: spec.FP32, true: spec.TF32}[tf32]},
		} {
			s, ga := row(c.dt)
			r := &Report{Steps: []StepRow{s}, gemmCalls: []runtime.GemmArgs{ga}}
			if err := r.ModelGPU("h100", GPUOptions{Graphs: true, TF32: tf32}); err != nil {
				t.Fatal(err)
			}
			want := float64(flops) / (gemmEff(ga) * c.peak) * 1e6
			if got := r.GPU.KernelUs; math.Abs(got-want) > 1e-9*want {
				t.Errorf("%v GEMM (tf32 %v): %.3f µs, want %.3f µs at %.4g FLOP/s", c.dt, tf32, got, want, c.peak)
			}
			half := 0
			if c.dt == runtime.BF16 || c.dt == runtime.F16 {
				half = 1
			}
			if r.GPU.HalfGemms != half {
				t.Errorf("%v GEMM: HalfGemms %d, want %d", c.dt, r.GPU.HalfGemms, half)
			}
			var buf bytes.Buffer
			if err := r.writeGPU(&buf); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(buf.String(), "16-bit GEMMs on FP16/BF16 tensor cores"); got != (half == 1) {
				t.Errorf("%v GEMM: the summary's line does not say so:\n%s", c.dt, buf.String())
			}
		}
	}
	if spec.Half <= spec.TF32 {
		t.Errorf("h100: the 16-bit tensor-core peak %.4g is not above TF32's %.4g", spec.Half, spec.TF32)
	}

	// The seed models under -amp bf16: every 16-bit GEMM row is priced at
	// the 16-bit peak. Each row's time is compared with the same row's
	// arguments in f32 (twice the bytes, the FP32 peak).
	for _, c := range []struct{ file, model string }{{"mlp", "mlp"}, {"convnet", "convnet"}, {"transformer", "gpt"}} {
		models, err := eval.Models(filepath.Join("..", "models", c.file, "model.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, md := range models {
			if md.Name != c.model {
				continue
			}
			p, err := compiler.Compile(md, compiler.Options{Fuse: true, RefBatch: 16, AMP: compiler.AMPBF16})
			if err != nil {
				t.Fatal(err)
			}
			r := h100Report(t, p)
			half := 0
			for i, s := range r.Steps {
				ga := r.gemmCalls[i]
				if s.Kind != "gemm" || (ga.DType != runtime.BF16 && ga.DType != runtime.F16) {
					continue
				}
				half++
				f := &Report{Steps: []StepRow{s}, gemmCalls: []runtime.GemmArgs{ga}}
				f.Steps[0].Bytes *= 2
				f.gemmCalls[0].DType = runtime.F32
				if err := f.ModelGPU("h100", GPUOptions{Graphs: true}); err != nil {
					t.Fatal(err)
				}
				if s.GPUUs >= f.Steps[0].GPUUs {
					t.Errorf("%s row %d: the bf16 GEMM modeled at %.2f µs, not below f32's %.2f", c.model, i, s.GPUUs, f.Steps[0].GPUUs)
				}
			}
			if half == 0 || r.GPU.HalfGemms != half {
				t.Errorf("%s -amp bf16: %d 16-bit GEMM rows, summary counts %d", c.model, half, r.GPU.HalfGemms)
			}
		}
	}
}
