package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileFlags (issue 27's second hostile pass, docs/HOSTILE.md):
// -dist-timeout without -dist and -torch-script without -torch were read
// by nothing; -torch with a script that is not there failed only after
// every epoch; gpt and transformer runs of one optimizer step (-epochs 0
// to only -save, -epoch-steps 1) were refused, their default warm-up of 1
// step being the whole run.
func TestHostileFlags(t *testing.T) {
	base := runFlags{model: "mlp", epochs: 1, accum: 1, batch: "64", device: "cpu", length: 200, temperature: 0.8}
	for _, c := range []struct {
		given []string
		want  string
	}{
		{[]string{"dist-timeout"}, "-dist-timeout: only -dist mpi's collectives read it"},
		{[]string{"torch-script"}, "-torch-script: only -torch runs the PyTorch peer"},
	} {
		f := base
		f.set = map[string]bool{}
		for _, g := range c.given {
			f.set[g] = true
		}
		if err := f.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.given, err, c.want)
		}
	}
	missing := filepath.Join(t.TempDir(), "peer.py")
	code, out := trainMain(t, "-model", "mlp", "-torch", "-torch-script", missing, "-data", "/nonexistent")
	if want := "-torch-script " + missing; code != 2 || !strings.Contains(out, want) {
		t.Errorf("-torch with a missing script: exit %d, output %q; want exit 2 and %q", code, out, want)
	}
	for _, model := range []string{"gpt", "transformer"} {
		for _, total := range []int{0, 1, 2} {
			r := &recipe{set: map[string]bool{}}
			r.defaults(model)
			if _, err := r.plan(3e-4, total); err != nil {
				t.Errorf("%s, a run of %d steps: %v", model, total, err)
			}
		}
	}
}
