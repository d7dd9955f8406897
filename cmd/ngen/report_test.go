package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportCheckpoint: ngen report prints the planned peak memory of a
// checkpointed model with and without its checkpoints, for checkpoints
// declared in the DSL and for those a -memory-budget chose.
func TestReportCheckpoint(t *testing.T) {
	model := filepath.Join("..", "..", "models", "deepmlp", "model.go")
	for _, args := range [][]string{
		{"-model", "deepmlp", model},
		{"-model", "deepmlp_plain", "-memory-budget", "108000000", model},
	} {
		out := captureStdout(t, func() error { return report(args) })
		if !strings.Contains(out, "planned peak memory: ") || !strings.Contains(out, "without checkpointing: planned peak memory ") {
			t.Fatalf("report %v:\n%s", args, out)
		}
		if !strings.Contains(out, "_re") {
			t.Errorf("report %v lists no recomputing kernel", args)
		}
	}
	out := captureStdout(t, func() error { return report([]string{"-model", "deepmlp_plain", model}) })
	if strings.Contains(out, "without checkpointing") {
		t.Errorf("plain model reports checkpointing:\n%s", out)
	}
}

func captureStdout(t *testing.T, f func() error) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	err = f()
	os.Stdout = old
	w.Close()
	out := <-done
	if err != nil {
		t.Fatal(err)
	}
	return out
}
