package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// recipe is the training options that -lr, -schedule, -warmup, -clip and
// -weight-decay give. The rate, its schedule and the weight decay are
// run-time data (Session.SetSchedule, Session.SetWeightDecay), so they
// apply to every generated model as it is; gradient clipping (a
// grad-norm kernel and a scale in the update) is compiled into a model,
// so -clip is refused with what to do instead.
type recipe struct {
	lr          float64 // 0: the model's declared rate
	schedule    string  // "", constant, cosine, step, onecycle
	warmup      int
	clip        float64
	weightDecay float64
	set         map[string]bool
}

// recipeFlags declares the flags on the default flag set.
func recipeFlags() *recipe {
	r := &recipe{}
	flag.Float64Var(&r.lr, "lr", 0, "learning rate (0: the model's); with -schedule, the schedule's peak (base) rate")
	flag.StringVar(&r.schedule, "schedule", "", "learning-rate schedule over the run: constant, cosine (to 0 at the last step), step (×0.1 at each third of the run) or onecycle (OneCycleLR, peak -lr); empty: the model's own")
	flag.IntVar(&r.warmup, "warmup", 0, "steps of linear warm-up (constant and cosine schedules) or of OneCycleLR's rising phase (onecycle)")
	flag.Float64Var(&r.clip, "clip", 0, "clip gradients to this global norm (refused: clipping is compiled into a model, dsl.ClipGradNorm; see README)")
	flag.Float64Var(&r.weightDecay, "weight-decay", 0, "weight decay (Adam's and SGD's L2 term, AdamW's decoupled decay) of the model's default parameter group and of its groups without a decay of their own (default: the model's, or a checkpoint's)")
	return r
}

// given reports whether -lr or -schedule was given (a nil recipe, as
// tests pass, gives neither).
func (r *recipe) given() bool { return r != nil && (r.set["lr"] || r.schedule != "") }

// decay reports whether -weight-decay was given.
func (r *recipe) decay() bool { return r != nil && r.set["weight-decay"] }

// check refuses a recipe the run would misread, before any work.
func (r *recipe) check() error {
	switch {
	case r.set["lr"] && (math.IsNaN(r.lr) || math.IsInf(r.lr, 0) || r.lr <= 0 || r.lr > runtime.MaxLR):
		return fmt.Errorf("-lr %v: want a finite rate in (0, %g]", r.lr, runtime.MaxLR)
	case r.warmup < 0:
		return fmt.Errorf("-warmup %d: want 0 or more steps", r.warmup)
	case r.set["warmup"] && r.schedule == "":
		return fmt.Errorf("-warmup: give -schedule constant, cosine or onecycle too")
	case r.set["warmup"] && r.schedule == "step":
		return fmt.Errorf("-warmup: -schedule step has no warm-up (use constant, cosine or onecycle)")
	case r.set["clip"]:
		return fmt.Errorf("-clip %v: clipping is compiled into a model's update (its grad-norm kernel); declare it in the model (Clip: dsl.ClipGradNorm(%v) on its optimizer) and run go generate", r.clip, r.clip)
	case r.set["weight-decay"] && (math.IsNaN(r.weightDecay) || math.IsInf(r.weightDecay, 0) || r.weightDecay < 0):
		return fmt.Errorf("-weight-decay %v: want a finite decay ≥ 0", r.weightDecay)
	}
	switch r.schedule {
	case "", "constant", "cosine", "step", "onecycle":
	default:
		return fmt.Errorf("-schedule %q: want constant, cosine, step or onecycle", r.schedule)
	}
	return nil
}

// plan is the schedule for a run of total optimizer steps at base rate
// base: nil for a constant rate.
func (r *recipe) plan(base float64, total int) (*schedule.Schedule, error) {
	total = max(total, 1)
	var sc *schedule.Schedule
	switch r.schedule {
	case "constant":
		if r.warmup > 0 {
			sc = &schedule.Schedule{Kind: "linear", StartFactor: 1 / float64(r.warmup), EndFactor: 1, Iters: r.warmup}
		}
	case "cosine":
		sc = &schedule.Schedule{Kind: "warmup_cosine", Iters: r.warmup, Total: total, StartFactor: 1}
		if r.warmup > 0 {
			sc.StartFactor = 1 / float64(r.warmup)
		}
	case "step":
		sc = &schedule.Schedule{Kind: "step", StepSize: max(total/3, 1), Gamma: 0.1}
	case "onecycle":
		pct := 0.3
		if r.warmup > 0 {
			pct = float64(r.warmup) / float64(total)
		}
		sc = &schedule.Schedule{Kind: "onecycle", Total: total, PctStart: pct, DivFactor: 25, FinalDivFactor: 1e4}
	}
	if p := sc.Check(base); p != "" {
		return nil, fmt.Errorf("-schedule %s -warmup %d over %d steps: %s", r.schedule, r.warmup, total, p)
	}
	return sc, nil
}

// resolve is the rate and schedule of a run of total more optimizer
// steps after done, from the current ones (a model's declared rate and
// schedule, or a checkpoint's): -lr replaces the rate, -schedule the
// schedule, spanning the whole run counted from step 1 as the step
// counter is (a resumed run's schedule covers the steps already taken).
func (r *recipe) resolve(base float64, cur *schedule.Schedule, done, total int) (float64, *schedule.Schedule, error) {
	if r.set["lr"] {
		base = r.lr
	}
	if r.schedule == "" {
		return base, cur, nil
	}
	sc, err := r.plan(base, done+total)
	return base, sc, err
}

// apply sets the rate, schedule and weight decay on s for a run of total
// more optimizer steps. Without -lr, -schedule and -weight-decay it
// changes nothing, so the model's own, or a checkpoint's, run. The decay
// is the default group's and that of the groups without their own
// (dsl.ParamGroup): a group that declares its decay keeps it.
func (r *recipe) apply(s *runtime.Session, total int) error {
	if r.decay() {
		if err := s.SetWeightDecay(r.weightDecay); err != nil {
			return err
		}
	}
	if !r.given() {
		return nil
	}
	base, cur := s.Schedule()
	base, sc, err := r.resolve(base, cur, s.Steps(), total)
	if err != nil {
		return err
	}
	return s.SetSchedule(base, sc)
}

// peerArgs are the PyTorch peer's arguments for the same recipe over
// total steps from a fresh start with the plan's optimizer: the rate, the
// schedule as runtime/schedule JSON (bench/torch_train.py builds the
// torch scheduler from it with testdata/oracle/torch_lr.py's builder),
// and the weight decay when there is one (-weight-decay's, or the
// model's).
func (r *recipe) peerArgs(o runtime.Optimizer, total int) ([]string, error) {
	if r == nil {
		r = &recipe{}
	}
	base, sc, err := r.resolve(o.LR, o.Schedule, 0, total)
	if err != nil {
		return nil, err
	}
	args := []string{"--lr", fmt.Sprint(base)}
	if wd := o.WeightDecay; r.decay() || wd != 0 {
		if r.decay() {
			wd = r.weightDecay
		}
		args = append(args, "--weight-decay", fmt.Sprint(wd))
	}
	if sc != nil {
		j, err := json.Marshal(sc)
		if err != nil {
			return nil, err
		}
		args = append(args, "--schedule", string(j))
	}
	return args, nil
}
