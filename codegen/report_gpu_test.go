package codegen

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
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
// device calls; and the modeled H100 step of the benchmark MLP and the
// ConvNet, fused, with CUDA graphs, is within 2× of the roofline ideal.
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
		if n := reports[name].DeviceCalls; n > 40 {
			t.Errorf("%s: %d device calls per step, want <= 40", name, n)
		}
	}
	for _, name := range []string{"mlpbench", "convnet"} {
		r := reports[name]
		if err := r.ModelGPU("h100", GPUOptions{Graphs: true}); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s on H100: modeled %.1f µs, ideal %.1f µs, ratio %.2f, %d device calls", name, r.GPUModelUs, r.GPUIdealUs, r.GPU.Ratio, r.DeviceCalls)
		if r.GPU.Ratio > 2 {
			t.Errorf("%s: modeled H100 step %.1f µs is %.2f× the roofline ideal %.1f µs, want <= 2×", name, r.GPUModelUs, r.GPU.Ratio, r.GPUIdealUs)
		}
	}
}

// TestModelGPUArithmetic checks the model on hand-made rows: a launch
// moving 3.35 MB on H100 takes 1 µs at full occupancy, 2 µs on half the
// SMs, plus the per-call overhead; graphs swap that for the node
// overhead and one graph launch. It also checks the JSON keys.
func TestModelGPUArithmetic(t *testing.T) {
	r := &Report{Steps: []StepRow{
		{Kind: "launch", Kernel: "a", Bytes: 3_350_000, Calls: 1, Blocks: 132},
		{Kind: "launch", Kernel: "b", Bytes: 3_350_000, Calls: 1, Blocks: 66},
		{Kind: "memset", Calls: 1},
	}, gemmCalls: nil}
	r.gemmCalls = make([]runtime.GemmArgs, len(r.Steps))
	if err := r.ModelGPU("h100", GPUOptions{}); err != nil {
		t.Fatal(err)
	}
	want := 1 + 2 + 3*eagerCallUs
	if math.Abs(r.GPUModelUs-want) > 1e-9 || math.Abs(r.GPUIdealUs-2) > 1e-9 {
		t.Fatalf("eager: model %v ideal %v, want %v and 2", r.GPUModelUs, r.GPUIdealUs, want)
	}
	if err := r.ModelGPU("h100", GPUOptions{Graphs: true}); err != nil {
		t.Fatal(err)
	}
	if want := 1 + 2 + 3*graphNodeUs + graphLaunch; math.Abs(r.GPUModelUs-want) > 1e-9 {
		t.Fatalf("graphs: model %v, want %v", r.GPUModelUs, want)
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
