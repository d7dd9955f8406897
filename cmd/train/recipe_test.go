package main

import (
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// TestRecipeFlagsRefused: each flag the run cannot honour is an error
// that says why, before any work.
func TestRecipeFlagsRefused(t *testing.T) {
	for _, c := range []struct {
		r    recipe
		want string
	}{
		{recipe{lr: -1, set: map[string]bool{"lr": true}}, "-lr -1"},
		{recipe{lr: 2e6, set: map[string]bool{"lr": true}}, "-lr 2e+06"},
		{recipe{schedule: "poly"}, `-schedule "poly"`},
		{recipe{warmup: 10, set: map[string]bool{"warmup": true}}, "give -schedule"},
		{recipe{schedule: "step", warmup: 10, set: map[string]bool{"warmup": true}}, "step has no warm-up"},
		{recipe{schedule: "cosine", warmup: -1, set: map[string]bool{"warmup": true}}, "-warmup -1"},
		{recipe{clip: 1, set: map[string]bool{"clip": true}}, "-clip 1: clipping is compiled into a model's update"},
		{recipe{weightDecay: -0.1, set: map[string]bool{"weight-decay": true}}, "-weight-decay -0.1: want a finite decay ≥ 0"},
		{recipe{weightDecay: math.Inf(1), set: map[string]bool{"weight-decay": true}}, "-weight-decay +Inf"},
	} {
		if c.r.set == nil {
			c.r.set = map[string]bool{}
		}
		if err := c.r.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.r, err, c.want)
		}
	}
	r := recipe{schedule: "cosine", warmup: 500, set: map[string]bool{"warmup": true}}
	if err := r.check(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.plan(1e-3, 400); err == nil || !strings.Contains(err.Error(), "warm-up 500, total 400") {
		t.Errorf("a warm-up longer than the run: %v", err)
	}
}

// TestRecipePlans: what each -schedule means over a run.
func TestRecipePlans(t *testing.T) {
	for _, c := range []struct {
		r    recipe
		want *schedule.Schedule
	}{
		{recipe{schedule: "constant"}, nil},
		{recipe{schedule: "constant", warmup: 4}, &schedule.Schedule{Kind: "linear", StartFactor: 0.25, EndFactor: 1, Iters: 4}},
		{recipe{schedule: "cosine", warmup: 10}, &schedule.Schedule{Kind: "warmup_cosine", Iters: 10, Total: 900, StartFactor: 0.1}},
		{recipe{schedule: "cosine"}, &schedule.Schedule{Kind: "warmup_cosine", Total: 900, StartFactor: 1}},
		{recipe{schedule: "step"}, &schedule.Schedule{Kind: "step", StepSize: 300, Gamma: 0.1}},
		{recipe{schedule: "onecycle", warmup: 90}, &schedule.Schedule{Kind: "onecycle", Total: 900, PctStart: 0.1, DivFactor: 25, FinalDivFactor: 1e4}},
	} {
		got, err := c.r.plan(1e-3, 900)
		if err != nil {
			t.Fatalf("%+v: %v", c.r, err)
		}
		if (got == nil) != (c.want == nil) || got != nil && got.String() != c.want.String() {
			t.Errorf("%+v: %v, want %v", c.r, got, c.want)
		}
	}
}

// TestRecipeApplies: -lr and -schedule reach a generated model's session
// as run-time data, and the peer gets the same rate and schedule.
func TestRecipeApplies(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m, err := models["mlp"](dev, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := m.Session()
	var none *recipe
	if err := none.apply(s, 100); err != nil || s.LR() != s.Plan().Optimizer.LR {
		t.Fatalf("no flags changed the rate to %g (%v)", s.LR(), err)
	}
	r := &recipe{lr: 3e-3, schedule: "cosine", warmup: 10, set: map[string]bool{"lr": true, "warmup": true}}
	if err := r.apply(s, 100); err != nil {
		t.Fatal(err)
	}
	base, sc := s.Schedule()
	if base != 3e-3 || sc == nil || sc.Kind != "warmup_cosine" || sc.Total != 100 || math.Abs(s.LR()-3e-4) > 1e-18 {
		t.Fatalf("after -lr 3e-3 -schedule cosine -warmup 10: base %g, schedule %v, first rate %g", base, sc, s.LR())
	}
	args, err := r.peerArgs(s.Plan().Optimizer, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(args) != 4 || args[1] != "0.003" || !strings.Contains(args[3], `"kind":"warmup_cosine"`) {
		t.Fatalf("peer arguments %q", args)
	}
	// -weight-decay: run-time data of every model (the MLP's Adam was
	// declared without decay), and the peer's decay too.
	r = &recipe{weightDecay: 0.02, set: map[string]bool{"weight-decay": true}}
	if err := r.check(); err != nil {
		t.Fatal(err)
	}
	if err := r.apply(s, 100); err != nil || s.WeightDecay() != 0.02 {
		t.Fatalf("-weight-decay 0.02: the session's decay is %g (%v)", s.WeightDecay(), err)
	}
	if base, sc := s.Schedule(); base != 3e-3 || sc == nil {
		t.Fatalf("-weight-decay alone changed the rate or schedule: %g %v", base, sc)
	}
	args, err = r.peerArgs(s.Plan().Optimizer, 100)
	if err != nil || strings.Join(args, " ") != "--lr 0.001 --weight-decay 0.02" {
		t.Fatalf("peer arguments %q (%v)", args, err)
	}
}
