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
