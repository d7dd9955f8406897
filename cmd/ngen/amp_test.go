package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var mlpFile = filepath.Join("..", "..", "models", "mlp", "model.go")

// TestReportAMP: ngen report -amp puts the seed MLP under mixed precision
// (bf16 without scaling, fp16 with GradScaler's), prints every buffer's
// dtype and the planned peak against the same model's f32 plan; -amp off
// and no -amp print no comparison.
func TestReportAMP(t *testing.T) {
	for _, c := range []struct{ amp, want string }{
		{"bf16", "mixed precision bf16 (set by -amp bf16): planned peak memory "},
		{"fp16", "mixed precision f16 (set by -amp fp16, dynamic loss scaling from 65536): planned peak memory "},
	} {
		out := captureStdout(t, func() error { return report([]string{"-amp", c.amp, "-model", "mlp", mlpFile}) })
		if !strings.Contains(out, c.want) || !strings.Contains(out, "the f32 plan's ") {
			t.Errorf("report -amp %s: no comparison with f32:\n%s", c.amp, out)
		}
		half := strings.Fields(c.want)[2] // bf16 or f16
		if !strings.Contains(out, "dtype") || !strings.Contains(out, "  "+half+"  ") || !strings.Contains(out, "fc1.weight        param   f32") {
			t.Errorf("report -amp %s: buffer dtypes missing (want %s temporaries, f32 parameters):\n%s", c.amp, half, out)
		}
	}
	// The ConvNets (issue 25's memory target): the planned peak drops.
	for _, model := range []string{"convnet", "convnet_bn"} {
		out := captureStdout(t, func() error {
			return report([]string{"-amp", "bf16", "-json", "-model", model, filepath.Join("..", "..", "models", "convnet", "model.go")})
		})
		var r struct {
			PeakBytes    int64 `json:"peak_bytes"`
			F32PeakBytes int64 `json:"f32_peak_bytes"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if r.PeakBytes <= 0 || r.PeakBytes >= r.F32PeakBytes {
			t.Errorf("report -amp bf16 %s: peak %d, f32 peak %d: want a saving", model, r.PeakBytes, r.F32PeakBytes)
		}
	}
	for _, args := range [][]string{{"-amp", "off", "-model", "mlp", mlpFile}, {"-model", "mlp", mlpFile}} {
		out := captureStdout(t, func() error { return report(args) })
		if strings.Contains(out, "mixed precision") || strings.Contains(out, "bf16") || !strings.Contains(out, "buffer bytes by dtype (before arena reuse): f32 ") {
			t.Errorf("report %v:\n%s", args, out)
		}
	}

	// The JSON form carries the same: the policy, the f32 peak and the
	// buffers' dtypes. At a large batch the bf16 activations outweigh the
	// bf16 copies of the weights, and the plan is smaller than f32's.
	out := captureStdout(t, func() error {
		return report([]string{"-amp", "bf16", "-json", "-batch", "4096", "-model", "mlp", mlpFile})
	})
	var r struct {
		Precision    string `json:"precision"`
		PeakBytes    int64  `json:"peak_bytes"`
		F32PeakBytes int64  `json:"f32_peak_bytes"`
		Buffers      []struct{ Name, Role, DType string }
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Precision, "bf16") || r.F32PeakBytes <= r.PeakBytes || r.PeakBytes <= 0 {
		t.Errorf("report -json -amp bf16 -batch 4096: precision %q, peak %d, f32 peak %d: want a saving", r.Precision, r.PeakBytes, r.F32PeakBytes)
	}
	types := map[string]bool{}
	for _, b := range r.Buffers {
		types[b.DType] = true
	}
	if !types["bf16"] || !types["f32"] || !types["i32"] {
		t.Errorf("report -json: buffer dtypes %v", types)
	}
}

// TestAMPFlagRefused: a bad -amp value is an error that says so; the
// LSTM, whose recurrence autocast keeps in f32, reports under -amp bf16
// with its decoder's GEMM in bf16.
func TestAMPFlagRefused(t *testing.T) {
	for name, cmd := range map[string]func([]string) error{"report": report, "build": build, "graph": graphCmd} {
		if err := cmd([]string{"-amp", "fp8", mlpFile}); err == nil || !strings.Contains(err.Error(), "-amp fp8: want bf16, fp16 or off") {
			t.Errorf("%s -amp fp8: %v", name, err)
		}
	}
	file := filepath.Join("..", "..", "models", "lstm", "model.go")
	out := captureStdout(t, func() error { return report([]string{"-amp", "bf16", "-model", "charlm", file}) })
	if !strings.Contains(out, "rnn_scan") || !strings.Contains(out, "bf16") {
		t.Errorf("report -amp bf16 charlm: no recurrence or no bf16 buffer in\n%s", out)
	}
}

// TestBuildAMP: ngen build -amp -model builds one model of the file in
// bf16: its kernels store bf16, and -amp off builds the same model in f32.
// An nvcc that fails stands in for the real one, which ngen does without.
func TestBuildAMP(t *testing.T) {
	fake := t.TempDir()
	if err := os.WriteFile(filepath.Join(fake, "nvcc"), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	out := outModule(t)
	model := filepath.Join("..", "..", "dsl", "eval", "testdata", "good", "model.go")
	for _, c := range []struct {
		amp  string
		half bool
	}{{"bf16", true}, {"off", false}} {
		if err := build([]string{"-o", out, "-amp", c.amp, "-model", "tiny", "-suffix", "_" + c.amp, model}); err != nil {
			t.Fatal(err)
		}
		cu, err := os.ReadFile(filepath.Join(out, "tiny_"+c.amp, "tiny_"+c.amp+".cu"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(cu), "__nv_bfloat16"); got != c.half {
			t.Errorf("build -amp %s: bf16 storage in the kernels %v, want %v", c.amp, got, c.half)
		}
		if _, err := os.Stat(filepath.Join(out, "second_"+c.amp)); !os.IsNotExist(err) {
			t.Errorf("build -model tiny also built the file's other model (%v)", err)
		}
	}
	if err := build([]string{"-o", out, "-model", "nosuch", model}); err == nil || !strings.Contains(err.Error(), `no model named "nosuch" (have tiny, second)`) {
		t.Errorf("build -model nosuch: %v", err)
	}
}
