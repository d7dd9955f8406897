package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runlog"
)

// trainCmd runs this test binary as cmd/train (TestMain) with args.
func trainCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "NGEN_TRAIN_MAIN=1")
	return cmd
}

var epochLines = regexp.MustCompile(`epoch (\d+): train loss ([0-9.]+), test accuracy ([0-9.]+)%`)

// TestLogPlotTrace trains the MLP for 2 epochs on a small Fashion-MNIST
// with -log, -plot, -profile -trace and -torch, and reads everything back:
// the log's last evaluation holds the loss and accuracy the run printed,
// its steps average to each printed epoch loss, PyTorch's log sits beside
// it in the same form, the picture and the trace are written.
func TestLogPlotTrace(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Fatal("/usr/bin/python3 missing: bash scripts/setup.sh installs PyTorch")
	}
	data := smallFashionMNIST(t, 640, 300)
	// bench/torch_train.py reads the .gz names (plain IDX inside is fine
	// for both readers).
	files, _ := filepath.Glob(filepath.Join(data, "*-ubyte"))
	for _, f := range files {
		if err := os.Rename(f, f+".gz"); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	logf, plot, trace := filepath.Join(out, "run.jsonl"), filepath.Join(out, "run.png"), filepath.Join(out, "step.json")
	b, err := trainCmd("-model", "mlp", "-epochs", "2", "-batch", "64", "-threads", "1", "-quiet", "-data", data,
		"-log", logf, "-plot", plot, "-profile", "-trace", trace, "-torch", "-torch-script", filepath.Join("..", "..", "bench", "torch_train.py")).CombinedOutput()
	if err != nil {
		t.Fatalf("train: %v\n%s", err, b)
	}
	printed := epochLines.FindAllStringSubmatch(string(b), -1)
	if len(printed) != 2 {
		t.Fatalf("want two epoch lines:\n%s", b)
	}
	l, err := runlog.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	if l.Run.Framework != "ngen" || l.Run.Model != "mlp" || l.Run.Batch != 64 || len(l.Steps) != 20 || len(l.Evals) != 2 {
		t.Fatalf("log: run %+v, %d steps, %d evals", l.Run, len(l.Steps), len(l.Evals))
	}
	last := l.Evals[1]
	if got := fmt.Sprintf("%.4f", last.TrainLoss); got != printed[1][2] {
		t.Errorf("last logged loss %s, printed %s", got, printed[1][2])
	}
	if last.TestAcc == nil || fmt.Sprintf("%.2f", 100**last.TestAcc) != printed[1][3] {
		t.Errorf("last logged accuracy %v, printed %s%%", last.TestAcc, printed[1][3])
	}
	for e := 1; e <= 2; e++ {
		sum, n := 0.0, 0
		for _, s := range l.Steps {
			if s.Epoch == e {
				sum += s.Loss
				n++
			}
		}
		if got := fmt.Sprintf("%.4f", sum/float64(n)); n != 10 || got != printed[e-1][2] {
			t.Errorf("epoch %d: %d logged steps averaging %s, printed %s", e, n, got, printed[e-1][2])
		}
	}
	for i, s := range l.Steps {
		if s.Step != i+1 || s.LR != 1e-3 || s.SamplesPerS <= 0 || s.MemAllocated <= 0 || s.MemPeak < s.MemAllocated || s.Time <= 0 {
			t.Fatalf("step line %d: %+v", i+1, s)
		}
	}
	peer, err := runlog.ReadFile(filepath.Join(out, "run.torch.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if peer.Run.Framework != "pytorch" || len(peer.Steps) != 20 || len(peer.Evals) != 2 || peer.Evals[1].TestAcc == nil {
		t.Fatalf("PyTorch's log: run %+v, %d steps, %d evals", peer.Run, len(peer.Steps), len(peer.Evals))
	}
	if img, err := os.ReadFile(plot); err != nil || !bytes.HasPrefix(img, []byte("\x89PNG")) || len(img) < 10000 {
		t.Fatalf("-plot: %d bytes, %v", len(img), err)
	}
	tb, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		TraceEvents []struct {
			Name string  `json:"name"`
			Ph   string  `json:"ph"`
			Dur  float64 `json:"dur"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(tb, &tf); err != nil {
		t.Fatalf("-trace is not JSON: %v", err)
	}
	kernels := 0
	for _, e := range tf.TraceEvents {
		if e.Ph == "X" && e.Name == "fc1_bias_relu_dropout_fwd" {
			kernels++
		}
	}
	// The profiled epoch: 10 training steps.
	if kernels != 10 {
		t.Errorf("-trace: %d slices of fc1_bias_relu_dropout_fwd, want 10", kernels)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 4 {
		t.Errorf("left in the output directory: %v", ents)
	}
}

// TestOutputFlagsEarly: a bad extension or an unwritable place for -log,
// -plot or -trace, and -trace without -profile, stop the run before it
// loads any data or trains.
func TestOutputFlagsEarly(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "no", "such")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-plot", filepath.Join(dir, "run.jpg")}, `-plot ` + filepath.Join(dir, "run.jpg") + `: unknown extension ".jpg": want .png, .svg`},
		{[]string{"-plot", filepath.Join(missing, "run.png")}, "-plot " + filepath.Join(missing, "run.png") + ": cannot write there"},
		{[]string{"-log", filepath.Join(dir, "run.txt")}, `-log ` + filepath.Join(dir, "run.txt") + `: unknown extension ".txt": want .jsonl`},
		{[]string{"-log", filepath.Join(missing, "run.jsonl")}, "cannot write there"},
		{[]string{"-log", dir + "/"}, "-log"},
		{[]string{"-trace", filepath.Join(dir, "t.json")}, "give -profile too"},
		{[]string{"-profile", "-trace", filepath.Join(dir, "t.csv")}, `unknown extension ".csv": want .json`},
		{[]string{"-profile", "-trace", filepath.Join(missing, "t.json")}, "cannot write there"},
		{[]string{"-model", "rnn", "-plot", filepath.Join(dir, "run.gif")}, `unknown extension ".gif"`},
	} {
		args := append([]string{"-model", "mlp", "-epochs", "1", "-quiet", "-data", filepath.Join(dir, "absent")}, c.args...)
		b, err := trainCmd(args...).CombinedOutput()
		if err == nil || !strings.Contains(string(b), c.want) {
			t.Errorf("train %v: %v, output %q; want an error with %q", c.args, err, b, c.want)
		}
		if strings.Contains(string(b), "fashion-mnist") || strings.Contains(string(b), "model mlp on") || strings.Contains(string(b), "epoch 1") {
			t.Errorf("train %v got as far as the data: %q", c.args, b)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}
