package main

import (
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
