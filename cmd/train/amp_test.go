package main

import (
	"github.com/ngen-ml/ngen/codegen"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/models/builds"
	"github.com/ngen-ml/ngen/runtime"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestAMPRefused: -amp trains a model's mixed-precision build (a package
// in generated/, or one compiled at run time from the model's
// declaration) or says why it cannot: a value other than bf16, fp16 or
// off is an error, fp16 does not combine
// with the PyTorch peer, and an AMP package is not a -model of its own.
// Both types combine with -dist (the ranks agree on a loss scaler's
// skips: runtime/dataparallel.go).
func TestAMPRefused(t *testing.T) {
	for _, c := range []struct {
		model, amp, device, dist string
		torch                    bool
		want                     string
	}{
		{"convnet_bf16", "", "cpu", "", false, "-model convnet_bf16 is convnet's mixed-precision build: give -model convnet -amp bf16"},
		{"gpt", "fp16", "cpu", "", true, "PyTorch 1.13's CPU autocast has no float16"},
		{"mlp", "fp8", "cpu", "", false, "-amp fp8: want bf16, fp16 or off"},
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
		// On a GPU: generated/'s packages, or the .cu compiled at run
		// time (jit.go) for the backend's NVRTC.
		{"mlp", "bf16", "cuda"}, {"lstm", "bf16", "cuda"}, {"gpt", "fp16", "cuda"},
		{"mlp", "bf16", ""}, {"mlp", "fp16", ""}, {"mlp", "off", ""}, {"convnet", "off", ""}, {"convnet", "bf16", ""}, {"lstm", "", ""}, {"mlp", "bf16", "mpi"}, {"mlp", "fp16", "mpi"},
		// Compiled at run time from the declaration (jit.go).
		{"convnet", "fp16", ""}, {"convnet_bn", "bf16", ""}, {"lstm", "bf16", ""}, {"rnn", "fp16", ""}, {"gpt", "bf16", ""}, {"transformer", "fp16", ""}, {"gpt", "bf16", "mpi"},
	} {
		_, seq := seqTasks[c.model]
		dev, dist := "cpu", c.dist
		if dist == "cuda" {
			dev, dist = "cuda", ""
		}
		if err := checkAMP(c.model, c.amp, seq, dev, dist, c.amp == "bf16"); err != nil {
			t.Errorf("-model %s -amp %s: %v", c.model, c.amp, err)
		}
	}
	for _, pkg := range []string{trainedAs("mlp", "bf16"), trainedAs("mlp", "fp16"), trainedAs("convnet", "bf16")} {
		if pkg == "" || strings.Contains(", "+modelNames()+", ", ", "+pkg+", ") {
			t.Errorf("AMP package %q: missing, or listed as a -model (%s)", pkg, modelNames())
		}
	}
}

// TestAMPTrain trains the MLP's bf16 and fp16 builds and the ConvNet's
// bf16 build for one short epoch (256 images, batches of 32) through the
// command: each learns (the loss is finite, the accuracy printed), fp16
// reports its loss scaling, and
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
		model, amp string
		extra      []string
		want       []string
	}{
		{"mlp", "bf16", []string{"-torch", "-torch-script", peer}, []string{"(bf16 mixed precision, package mlp_bf16)", "PyTorch ("}},
		{"mlp", "fp16", nil, []string{"(fp16 mixed precision, package mlp_fp16)", "loss scaling: scale 65536, 0 step(s) skipped"}},
		{"convnet", "bf16", nil, []string{"(bf16 mixed precision, package convnet_bf16)"}},
	} {
		args := append([]string{"-model", c.model, "-amp", c.amp, "-epochs", "1", "-batch", "32", "-threads", "1", "-quiet", "-data", dir}, c.extra...)
		code, out := trainMain(t, args...)
		if code != 0 || loss.FindStringSubmatch(out) == nil {
			t.Fatalf("-model %s -amp %s: exit %d\n%s", c.model, c.amp, code, out)
		}
		t.Logf("-model %s -amp %s:\n%s", c.model, c.amp, out)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("-model %s -amp %s: output lacks %q:\n%s", c.model, c.amp, w, out)
			}
		}
	}
	b, err := os.ReadFile(record)
	if err != nil || !strings.Contains(" "+string(b)+" ", " --amp bf16 ") {
		t.Errorf("the peer's arguments %q (%v) lack --amp bf16", b, err)
	}
}

// TestDistAMPTrain: `mpirun -np 2 train -model mlp -amp fp16 -dist mpi`
// trains an epoch with dynamic loss scaling on both ranks (the ranks
// agree on every skip, runtime/dist's TestDataParallelScalerAgrees), and
// prints the epoch line and the scaler's line once; the loss is that of
// one process with twice the batch, within f16's rounding.
func TestDistAMPTrain(t *testing.T) {
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Fatalf("mpirun not on PATH (scripts/setup.sh installs openmpi-bin): %v", err)
	}
	dir := smallFashionMNIST(t, 256, 100)
	args := []string{"-model", "mlp", "-amp", "fp16", "-epochs", "1", "-threads", "1", "-quiet", "-data", dir}
	run := func(name string, a ...string) (string, float64) {
		cmd := exec.Command(name, a...)
		cmd.Env = append(os.Environ(), "NGEN_TRAIN_MAIN=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(a, " "), err, out)
		}
		m := epochLine.FindAllStringSubmatch(string(out), -1)
		if len(m) != 1 || strings.Count(string(out), "loss scaling: scale") != 1 {
			t.Fatalf("%s: want one epoch line and one loss scaling line:\n%s", name, out)
		}
		l, _ := strconv.ParseFloat(m[0][1], 64)
		return string(out), l
	}
	_, one := run(os.Args[0], append(args, "-batch", "64")...)
	out, two := run("mpirun", append([]string{"--oversubscribe", "--allow-run-as-root", "-np", "2", "-x", "NGEN_TRAIN_MAIN",
		os.Args[0], "-dist", "mpi", "-batch", "32"}, args...)...)
	t.Logf("one process: loss %g; two:\n%s", one, out)
	// f16 GEMMs over 32 rows round other sums than over 64: 1%.
	if math.Abs(one-two) > 1e-2*one {
		t.Errorf("train loss %g with 2 processes of batch 32, %g with one of batch 64", two, one)
	}
}

// TestAMPCompiledAtRunTime: -amp for a model whose mixed-precision build
// generated/ lacks compiles it at run time from the model's declaration
// (jit.go) and trains it: ConvNet-BN in bf16 on Fashion-MNIST images,
// the LSTM in fp16 (its loss scaler reported), the sampler afterwards
// reading the checkpoint the fp16 run trained.
func TestAMPCompiledAtRunTime(t *testing.T) {
	images := smallFashionMNIST(t, 128, 64)
	fortunes := tinyFortunes(t, 24)
	// A stand-in peer that records its arguments: -torch -amp bf16 passes
	// --amp bf16 to the sequence models' peer too.
	peer := filepath.Join(t.TempDir(), "peer.py")
	record := filepath.Join(t.TempDir(), "args")
	if err := os.WriteFile(peer, []byte(`import json, sys
open(`+strconv.Quote(record)+`, "w").write(" ".join(sys.argv[1:]))
print(json.dumps({"epoch": 1, "val_bpc": 5.0, "train_loss": 4.0, "samples_per_s": 1.0}))
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-model", "convnet_bn", "-amp", "bf16", "-batch", "32", "-data", images},
			[]string{"convnet_bn: bf16 build made at run time", "(bf16 mixed precision, package convnet_bn_bf16)", "epoch 1: train loss"}},
		{[]string{"-model", "lstm", "-amp", "fp16", "-batch", "8", "-data", fortunes, "-sample", "the cat", "-length", "20"},
			[]string{"charlm: fp16 build made at run time", "(fp16 mixed precision, build charlm_fp16)", "epoch 1: train loss", "loss scaling: scale 65536, 0 step(s) skipped", "the cat"}},
		{[]string{"-model", "lstm", "-amp", "bf16", "-batch", "8", "-data", fortunes, "-torch", "-torch-script", peer},
			[]string{"(bf16 mixed precision, build charlm_bf16)", "torch val bpc"}},
	} {
		args := append([]string{"-epochs", "1", "-threads", "1", "-quiet"}, c.args...)
		code, out := trainMain(t, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s", strings.Join(c.args[:4], " "), code, out)
		}
		t.Logf("%s:\n%s", strings.Join(c.args[:4], " "), out)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", strings.Join(c.args[:4], " "), w, out)
			}
		}
	}
	b, err := os.ReadFile(record)
	if err != nil || !strings.Contains(" "+string(b)+" ", " --amp bf16 ") {
		t.Errorf("the sequence peer's arguments %q (%v) lack --amp bf16", b, err)
	}
}

// TestDeclarationsMatchPackages: each declaration -amp compiles from
// (jit.go) is the model its f32 package was generated from: compiled with
// -amp off, its CUDA C is the package's, byte for byte.
func TestDeclarationsMatchPackages(t *testing.T) {
	for pkg := range declarations {
		g, err := runtime.Registered(pkg)
		if err != nil {
			t.Fatal(err)
		}
		p, err := builds.Program(pkg, "off")
		if err != nil {
			t.Fatal(err)
		}
		r, err := codegen.Render(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := codegen.CUDA(p, r.CUDA), g.Module().Source; got != want {
			t.Errorf("%s: the declaration's kernels (%d bytes) are not the package's (%d bytes)", pkg, len(got), len(want))
		}
	}
}

// TestAttentionFormBuild: -attention-form cuda-cores makes -device cuda's
// run-time build of the gpt in bf16 keep its attention on CUDA cores (the
// .cu alone, for NVRTC: no GPU needed to build it), and auto keeps the
// tensor-core form.
func TestAttentionFormBuild(t *testing.T) {
	defer func(f ops.TensorForm) { attentionForm = f }(attentionForm)
	say := func(string, ...any) {}
	for _, c := range []struct {
		form ops.TensorForm
		name string
		wmma bool
	}{{ops.TensorNever, "gpt_bf16_cudacores_gpu", false}, {ops.TensorAuto, "gpt_bf16_gpu", true}} {
		attentionForm = c.form
		g, err := compileAMP("gpt", "bf16", "cuda", say)
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(g.Module().Source, "wmma::mma_sync"); g.Name != c.name || has != c.wmma {
			t.Errorf("-attention-form %s: build %s, wmma in its source %v; want %s, %v", c.form, g.Name, has, c.name, c.wmma)
		}
	}
}
