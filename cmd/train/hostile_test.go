package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestHostileFlags (issue 27's second hostile pass, docs/HOSTILE.md):
// -dist-timeout without -dist, -torch-script without -torch and the
// training flags of lstm/gpt -load -sample were read by nothing; -lr and
// -clip of 1e-320 are 0 in float32; -torch with a script that is not there failed only after
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
		// -load with -sample generates and trains nothing: -save wrote
		// no file, -epochs ran none, with exit 0.
		{[]string{"load", "sample", "save"}, "-save: lstm -load generates from the checkpoint without training"},
		{[]string{"load", "sample", "epochs"}, "-epochs: lstm -load generates"},
		{[]string{"load", "sample", "lr"}, "-lr: lstm -load generates"},
	} {
		f := base
		if c.given[0] == "load" {
			f.model = "lstm"
		}
		f.set = map[string]bool{}
		for _, g := range c.given {
			f.set[g] = true
		}
		if err := f.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.given, err, c.want)
		}
	}
	// Positive as float64 but 0 in the f32 kernels: nothing trained.
	for _, c := range []struct {
		r    recipe
		want string
	}{
		{recipe{lr: 1e-320, set: map[string]bool{"lr": true}}, "-lr 1e-320: rounds to 0 in float32"},
		{recipe{clip: 1e-320, set: map[string]bool{"clip": true}}, "-clip 1e-320: rounds to 0 in float32"},
	} {
		if err := c.r.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
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
