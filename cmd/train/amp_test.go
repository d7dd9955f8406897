package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestAMPRefused: -amp trains a model's mixed-precision build or says
// why it cannot: a model with convolutions or recurrences has none
// (autocast refuses them), the Transformers have no package built with
// -amp, a value other than bf16, fp16 or off is
// an error, the GPU backend runs no 16-bit GEMM, fp16 does not combine
// with -dist or with the PyTorch peer, and an AMP package is not a
// -model of its own.
func TestAMPRefused(t *testing.T) {
	for _, c := range []struct {
		model, amp, device, dist string
		torch                    bool
		want                     string
	}{
		{"convnet", "bf16", "cpu", "", false, "-amp bf16: convnet: convolutions in half precision are not built (docs/AMP.md)"},
		{"convnet_bn", "fp16", "cpu", "", false, "convnet_bn: convolutions in half precision are not built"},
		{"lstm", "bf16", "cpu", "", false, "lstm: recurrences in half precision are not built"},
		{"rnn", "bf16", "cpu", "", false, "rnn: recurrences in half precision are not built"},
		{"gpt", "fp16", "cpu", "", false, "gpt has no mixed-precision build in generated/"},
		{"transformer", "bf16", "cpu", "", false, "transformer has no mixed-precision build in generated/"},
		{"mlp", "fp8", "cpu", "", false, "-amp fp8: want bf16, fp16 or off"},
		{"mlp", "bf16", "cuda", "", false, "the GPU backend does not run 16-bit GEMMs yet"},
		{"mlp", "fp16", "cpu", "mpi", false, "-amp fp16: -dist mpi"},
		{"mlp", "fp16", "cpu", "", true, "PyTorch 1.13's CPU autocast has no float16"},
		{"mlp_bf16", "", "cpu", "", false, "-model mlp_bf16 is mlp's mixed-precision build: give -model mlp -amp bf16"},
	} {
		_, seq := seqTasks[c.model]
		err := checkAMP(c.model, c.amp, seq, c.device, c.dist, c.torch)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("-model %s -amp %s: %v, want %q", c.model, c.amp, err, c.want)
		}
	}
	for _, c := range []struct{ model, amp, dist string }{
		{"mlp", "bf16", ""}, {"mlp", "fp16", ""}, {"mlp", "off", ""}, {"convnet", "off", ""}, {"lstm", "", ""}, {"mlp", "bf16", "mpi"},
	} {
		_, seq := seqTasks[c.model]
		if err := checkAMP(c.model, c.amp, seq, "cpu", c.dist, c.amp == "bf16"); err != nil {
			t.Errorf("-model %s -amp %s: %v", c.model, c.amp, err)
		}
	}
	for _, pkg := range []string{trainedAs("mlp", "bf16"), trainedAs("mlp", "fp16")} {
		if pkg == "" || strings.Contains(", "+modelNames()+", ", ", "+pkg+", ") {
			t.Errorf("AMP package %q: missing, or listed as a -model (%s)", pkg, modelNames())
		}
	}
}

// TestAMPTrain trains the MLP's bf16 and fp16 builds for one short epoch
// (256 images, batches of 32) through the command: each learns (the loss
// is finite, the accuracy printed), fp16 reports its loss scaling, and
// -torch -amp bf16 passes --amp bf16 to the peer (a stand-in script that
// records its arguments, so no PyTorch runs here).
func TestAMPTrain(t *testing.T) {
	dir := smallFashionMNIST(t, 256, 100)
	peer := filepath.Join(t.TempDir(), "peer.py")
	record := filepath.Join(t.TempDir(), "args")
	if err := os.WriteFile(peer, []byte(`import json, sys
open(`+strconv.Quote(record)+`, "w").write(" ".join(sys.argv[1:]))
print(json.dumps({"epoch": 1, "test_acc": 0.5, "train_loss": 1.0, "samples_per_s": 1.0}))
`), 0o644); err != nil {
		t.Fatal(err)
	}
	loss := regexp.MustCompile(`epoch 1: train loss ([0-9.]+), test accuracy`)
	for _, c := range []struct {
		amp   string
		extra []string
		want  []string
	}{
		{"bf16", []string{"-torch", "-torch-script", peer}, []string{"(bf16 mixed precision, package mlp_bf16)", "PyTorch ("}},
		{"fp16", nil, []string{"(fp16 mixed precision, package mlp_fp16)", "loss scaling: scale 65536, 0 step(s) skipped"}},
	} {
		args := append([]string{"-model", "mlp", "-amp", c.amp, "-epochs", "1", "-batch", "32", "-threads", "1", "-quiet", "-data", dir}, c.extra...)
		code, out := trainMain(t, args...)
		if code != 0 || loss.FindStringSubmatch(out) == nil {
			t.Fatalf("-amp %s: exit %d\n%s", c.amp, code, out)
		}
		t.Logf("-amp %s:\n%s", c.amp, out)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("-amp %s: output lacks %q:\n%s", c.amp, w, out)
			}
		}
	}
	b, err := os.ReadFile(record)
	if err != nil || !strings.Contains(" "+string(b)+" ", " --amp bf16 ") {
		t.Errorf("the peer's arguments %q (%v) lack --amp bf16", b, err)
	}
}
