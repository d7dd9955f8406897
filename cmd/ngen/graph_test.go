package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runlog"
)

// TestGraphCmd: ngen graph folds the 24 layers of models/deepmlp into one
// run drawn once, writes SVG and PNG through Graphviz (skipped without
// it), and refuses an unknown extension, an unwritable place and an
// unknown model before compiling anything.
func TestGraphCmd(t *testing.T) {
	model := filepath.Join("..", "..", "models", "deepmlp", "model.go")
	dot := captureStdout(t, func() error { return graphCmd([]string{"-model", "deepmlp_plain", model}) })
	if !strings.HasPrefix(dot, `digraph "deepmlp_plain" {`) || !strings.Contains(dot, "<B>×23</B> identical runs of 2 steps (fc2 … fc24)") {
		t.Fatalf("DOT of deepmlp_plain without its 23 folded layers:\n%.3000s", dot)
	}
	unfolded := captureStdout(t, func() error { return graphCmd([]string{"-model", "deepmlp_plain", "-fold=false", model}) })
	if n, m := strings.Count(dot, "subgraph cluster_s"), strings.Count(unfolded, "subgraph cluster_s"); n*2 > m {
		t.Fatalf("folded: %d steps drawn, unfolded %d", n, m)
	}
	dir := t.TempDir()
	for _, c := range []struct{ args, want string }{
		{"-o " + filepath.Join(dir, "g.jpg") + " " + model, `unknown extension ".jpg"`},
		{"-o " + filepath.Join(dir, "missing", "g.svg") + " " + model, "cannot write there"},
		{"-o " + filepath.Join(dir, "g.svg") + " -model nosuch " + model, `no model named "nosuch"`},
		{"-o " + filepath.Join(dir, "g.svg") + " " + model, "declares 2 models (deepmlp, deepmlp_plain); pick one with -model"},
		{"-gpu v100 " + model, "-gpu v100"},
	} {
		if err := graphCmd(strings.Fields(c.args)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("graph %s: %v, want %q", c.args, err, c.want)
		}
	}
	if _, err := exec.LookPath("dot"); err != nil {
		t.Skip("graphviz's dot is not on PATH (bash scripts/setup.sh installs it): SVG and PNG not rendered")
	}
	for _, ext := range []string{".svg", ".png", ".dot"} {
		out := filepath.Join(dir, "mlp"+ext)
		if err := graphCmd([]string{"-model", "mlp", "-fuse=none", "-o", out, filepath.Join("..", "..", "models", "mlp", "model.go")}); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out)
		if err != nil || len(b) < 1000 {
			t.Fatalf("%s: %d bytes, %v", out, len(b), err)
		}
		if want := map[string]string{".svg": "<svg", ".png": "\x89PNG", ".dot": "digraph"}[ext]; !bytes.Contains(b[:min(len(b), 400)], []byte(want)) {
			t.Errorf("%s does not start as a %s file", out, ext)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("left in the output directory: %v", ents)
	}
}

// TestPlotCmd: ngen plot draws two logs into one picture and refuses a
// bad extension, a missing log and a file that is not a log.
func TestPlotCmd(t *testing.T) {
	dir := t.TempDir()
	var logs []string
	for i, fw := range []string{"ngen", "pytorch"} {
		path := filepath.Join(dir, fw+".jsonl")
		w, err := runlog.Create(path, runlog.Run{Framework: fw, Model: "mlp"})
		if err != nil {
			t.Fatal(err)
		}
		for s := 1; s <= 40; s++ {
			w.Step(runlog.Step{Step: s, Epoch: 1 + (s-1)/20, Loss: 2 / float64(s+i), SamplesPerS: 100})
			if s%20 == 0 {
				w.Eval(runlog.Eval{Step: s, Epoch: s / 20, TestAcc: runlog.F(0.5 + float64(s)/100), SamplesPerS: 100})
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		logs = append(logs, path)
	}
	out := filepath.Join(dir, "cmp.svg")
	if err := plotCmd(append([]string{"-o", out}, logs...)); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(out); err != nil || !bytes.Contains(b, []byte("ngen mlp: 100 samples/s")) || !bytes.Contains(b, []byte("PyTorch mlp")) {
		t.Fatalf("cmp.svg: %v", err)
	}
	notLog := filepath.Join(dir, "notes.txt")
	os.WriteFile(notLog, []byte("hello\nworld\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", filepath.Join(dir, "cmp.gif"), logs[0]}, `unknown extension ".gif"`},
		{[]string{logs[0]}, "give the picture to write with -o"},
		{[]string{"-o", out, filepath.Join(dir, "none.jsonl")}, "none.jsonl"},
		{[]string{"-o", out, notLog}, "notes.txt: line 1"},
	} {
		if err := plotCmd(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("plot %v: %v, want %q", c.args, err, c.want)
		}
	}
}
