package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportGPU: ngen report -gpu prints the modeled step, the roofline
// ideal and their ratio, and -json adds device_calls, gpu_model_us and
// gpu_ideal_us; an unknown GPU is an error.
func TestReportGPU(t *testing.T) {
	model := filepath.Join("..", "..", "models", "mlp", "model.go")
	out := captureStdout(t, func() error { return report([]string{"-gpu", "h100", "-model", "mlpbench", model}) })
	for _, want := range []string{"device calls per step", "modeled step: ", "roofline ideal: ", "ratio: "} {
		if !strings.Contains(out, want) {
			t.Fatalf("report -gpu lacks %q:\n%s", want, out)
		}
	}
	out = captureStdout(t, func() error {
		return report([]string{"-json", "-gpu", "a100", "-graphs=false", "-model", "mlpbench", model})
	})
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"device_calls", "gpu_model_us", "gpu_ideal_us"} {
		if v, ok := obj[k].(float64); !ok || v <= 0 {
			t.Errorf("report -json -gpu: %s = %v", k, obj[k])
		}
	}
	if err := report([]string{"-gpu", "v100", "-model", "mlpbench", model}); err == nil || !strings.Contains(err.Error(), "h100") {
		t.Errorf("report -gpu v100: %v", err)
	}
}

// TestReportAttentionForm: ngen report -amp bf16 on the gpt reports its
// attention's products as tensor-core FLOPs (-json's tensor_flops) by
// default and none under -attention-form cuda-cores, whose modeled step
// is slower; a form it does not know is an error naming the flag.
func TestReportAttentionForm(t *testing.T) {
	model := filepath.Join("..", "..", "models", "transformer", "model.go")
	type out struct {
		Steps []struct {
			Ops         string `json:"ops"`
			TensorFlops int64  `json:"tensor_flops"`
		} `json:"steps"`
		Model float64 `json:"gpu_model_us"`
	}
	run := func(form string) (o out, tensorRows int) {
		s := captureStdout(t, func() error {
			return report([]string{"-json", "-gpu", "h100", "-amp", "bf16", "-batch", "16", "-attention-form", form, "-model", "gpt", model})
		})
		if err := json.Unmarshal([]byte(s), &o); err != nil {
			t.Fatal(err)
		}
		for _, r := range o.Steps {
			if r.TensorFlops > 0 {
				tensorRows++
			}
		}
		return o, tensorRows
	}
	auto, n := run("auto")
	if n != 8 {
		t.Errorf("-attention-form auto: %d rows with tensor-core FLOPs, want 8", n)
	}
	cores, n := run("cuda-cores")
	if n != 0 {
		t.Errorf("-attention-form cuda-cores: %d rows with tensor-core FLOPs", n)
	}
	if auto.Model <= 0 || cores.Model <= auto.Model {
		t.Errorf("modeled steps: %.1f µs with tensor cores, %.1f without", auto.Model, cores.Model)
	}
	if err := report([]string{"-attention-form", "tensor", model}); err == nil || !strings.Contains(err.Error(), "-attention-form") {
		t.Errorf("report -attention-form tensor: %v", err)
	}
}
