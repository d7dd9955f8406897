package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileFlags: issue 27's second hostile pass (docs/HOSTILE.md).
// report -tf32 and -graphs without -gpu printed the report and ignored
// them; a flag after the model file was reported as "want one model
// file". Each is refused before the model is read.
func TestHostileFlags(t *testing.T) {
	for _, c := range []struct {
		cmd  func([]string) error
		args []string
		want string
	}{
		{report, []string{"-tf32", "model.go"}, "report: -tf32 model the step on a GPU: give -gpu"},
		{report, []string{"-graphs=false", "model.go"}, "report: -graphs model the step on a GPU: give -gpu"},
		{build, []string{"model.go", "-batch", "3"}, "build: -batch after the model file model.go: flags go before the file"},
		{report, []string{"model.go", "-json"}, "report: -json after the model file model.go"},
		{graphCmd, []string{"a.go", "b.go"}, "graph: want one model file, got 2: a.go b.go"},
	} {
		err := c.cmd(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
		}
	}
}

// TestBuildReadsIndexFirst: a plan.json in the output directory that the
// index packages cannot read failed ngen build after it had written the
// model's package, leaving the index behind it. Now nothing is written.
func TestBuildReadsIndexFirst(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/gen\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "broken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken", "plan.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := build([]string{"-o", dir, filepath.Join("..", "..", "models", "mlp", "model.go")})
	if err == nil || !strings.Contains(err.Error(), "plan.json") {
		t.Fatalf("err = %v, want the broken plan.json named", err)
	}
	for _, name := range []string{"mlp", "mlpbench", "ngen_emu.h"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s written before the index was read", name)
		}
	}
}
