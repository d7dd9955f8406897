package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"strings"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// recipe is the training options that -lr, -schedule, -warmup, -min-lr,
// -clip and -weight-decay give. The rate, its schedule, the weight decay
// and the max norm of gradient clipping are run-time data (Session.SetSchedule,
// SetWeightDecay, SetClipNorm), so they apply to every generated model as
// it is: every registered model compiles clip_grad_norm_ in, off until a
// max norm is set (dsl.ClipGradNorm(math.Inf(1))). A model may have a
// default recipe (modelRecipes) for the flags not given.
type recipe struct {
	lr          float64 // 0: the model's declared rate
	schedule    string  // "", constant, cosine, step, onecycle
	warmup      int
	minLR       float64 // cosine's final rate (eta_min), absolute
	clip        float64 // 0: no clipping
	weightDecay float64
	set         map[string]bool
	// autoWarmup: the warm-up is the default recipe's, autoWarmup's
	// steps of the run's length; clipDefault: clip is the default
	// recipe's; lrDefault: lr is the default recipe's peak.
	autoWarmup, clipDefault, lrDefault bool
	// minFrac: the default recipe's floor, a fraction of the peak
	// (used when -min-lr is not given).
	minFrac float64
}

// recipeDefault is a model's default recipe.
type recipeDefault struct {
	schedule string  // with a warm-up of autoWarmup steps
	clip     float64 // max norm
	peak     float64 // the schedule's peak rate (0: the model's declared rate)
	minFrac  float64 // the cosine's floor, a fraction of the peak
}

// modelRecipes are the default recipes: the Transformers train with a
// linear warm-up then a cosine decay and gradients clipped to norm 1, as
// GPT-style models usually are (nanoGPT, minGPT). The gpt's peak is 6e-4
// (GPT-2's) and its cosine ends at half of it: the only cosine measured
// on docs/PERF.md's 2000-step run ("The gpt's default recipe") that ends
// below a constant 3e-4 (on all three seeds, 1.8% lower on the mean),
// and within 1% of PyTorch's run of it; 3e-4 to 0, 5e-4 to 5e-5, 6e-4 to
// 1.5e-4 and 1e-3 to 0 end higher than the constant. The TransformerLM's
// is unmeasured and keeps its declared 3e-4, to 0. A flag given replaces
// its part: -schedule constant for a constant rate (at the model's
// declared rate unless -lr), -lr for another peak (the floor stays half
// of it), -min-lr for another floor, -clip 0 for no clipping, -warmup N
// for another warm-up.
var modelRecipes = map[string]recipeDefault{
	"gpt":         {schedule: "cosine", clip: 1, peak: 6e-4, minFrac: 0.5},
	"transformer": {schedule: "cosine", clip: 1},
}

// autoWarmup is the default recipe's warm-up over a run of total steps:
// a twentieth of the run, between 1 and 100 steps, and shorter than the
// run (a warm-up of 1 over a run of 1 step, gpt -epochs 0 or
// -epoch-steps 1, was refused as an invalid schedule).
func autoWarmup(total int) int { return min(max(total/20, 1), 100, total-1) }

// defaults fills in model's default recipe for the flags not given.
func (r *recipe) defaults(model string) {
	d, ok := modelRecipes[model]
	if !ok {
		return
	}
	if r.set == nil {
		r.set = map[string]bool{}
	}
	if !r.set["schedule"] {
		r.schedule = d.schedule
		r.autoWarmup = !r.set["warmup"]
		if d.peak > 0 && !r.set["lr"] {
			r.lr, r.lrDefault = d.peak, true
		}
		if !r.set["min-lr"] {
			r.minFrac = d.minFrac
		}
	}
	if !r.set["clip"] {
		r.clip, r.clipDefault = d.clip, true
	}
}

// clipping reports whether the run sets the max norm (-clip, or the
// default recipe's).
func (r *recipe) clipping() bool { return r != nil && (r.set["clip"] || r.clipDefault) }

// maxNorm is the session's max norm for -clip: +Inf (off) for 0.
func (r *recipe) maxNorm() float64 {
	if r.clip == 0 {
		return math.Inf(1)
	}
	return r.clip
}

// recipeFlags declares the flags on the default flag set.
func recipeFlags() *recipe {
	r := &recipe{}
	flag.Float64Var(&r.lr, "lr", 0, "learning rate (0: the model's); with -schedule, the schedule's peak (base) rate")
	flag.StringVar(&r.schedule, "schedule", "", "learning-rate schedule over the run: constant, cosine (to -min-lr at the last step), step (×0.1 at each third of the run) or onecycle (OneCycleLR, peak -lr); default: the model's recipe (gpt: cosine with warm-up from 6e-4 to half of it; transformer: cosine with warm-up to 0) or its own")
	flag.IntVar(&r.warmup, "warmup", 0, "steps of linear warm-up (constant and cosine schedules) or of OneCycleLR's rising phase (onecycle); gpt and transformer default to -schedule cosine with a twentieth of the run's steps (1 to 100) of warm-up")
	flag.Float64Var(&r.minLR, "min-lr", 0, "-schedule cosine: the rate the cosine decays to at the last step, absolute as CosineAnnealingLR's eta_min (default 0); at most -lr")
	flag.Float64Var(&r.clip, "clip", 0, "clip gradients to this global norm before each update, as torch.nn.utils.clip_grad_norm_ (0: no clipping; default: the model's recipe, 1 for gpt and transformer, else none)")
	flag.Float64Var(&r.weightDecay, "weight-decay", 0, "weight decay (Adam's and SGD's L2 term, AdamW's decoupled decay) of the model's default parameter group and of its groups without a decay of their own (default: the model's, or a checkpoint's)")
	return r
}

// given reports whether -lr or -schedule was given (a nil recipe, as
// tests pass, gives neither).
func (r *recipe) given() bool { return r != nil && (r.setsLR() || r.schedule != "") }

// setsLR reports whether the run's rate is -lr's or the default recipe's
// peak rather than the model's (or a checkpoint's).
func (r *recipe) setsLR() bool { return r.set["lr"] || r.lrDefault }

// decay reports whether -weight-decay was given.
func (r *recipe) decay() bool { return r != nil && r.set["weight-decay"] }

// check refuses a recipe the run would misread, before any work.
func (r *recipe) check() error {
	switch {
	case r.set["lr"] && (math.IsNaN(r.lr) || math.IsInf(r.lr, 0) || r.lr <= 0 || r.lr > runtime.MaxLR):
		return fmt.Errorf("-lr %v: want a finite rate in (0, %g]", r.lr, runtime.MaxLR)
	case r.set["lr"] && float32(r.lr) == 0:
		// Positive as a float64, 0 in the f32 kernels: no update moved.
		return fmt.Errorf("-lr %v: rounds to 0 in float32, so nothing would train", r.lr)
	case r.set["clip"] && r.clip > 0 && float32(r.clip) == 0:
		return fmt.Errorf("-clip %v: rounds to 0 in float32, which scales every gradient to 0 (0: no clipping)", r.clip)
	case r.warmup < 0:
		return fmt.Errorf("-warmup %d: want 0 or more steps", r.warmup)
	case r.set["warmup"] && r.schedule == "":
		return fmt.Errorf("-warmup: give -schedule constant, cosine or onecycle too")
	case r.set["min-lr"] && (math.IsNaN(r.minLR) || math.IsInf(r.minLR, 0) || r.minLR < 0):
		return fmt.Errorf("-min-lr %v: want a finite rate ≥ 0", r.minLR)
	case r.set["min-lr"] && r.schedule != "cosine":
		return fmt.Errorf("-min-lr: only -schedule cosine decays to a floor (give -schedule cosine)")
	case r.set["warmup"] && r.schedule == "step":
		return fmt.Errorf("-warmup: -schedule step has no warm-up (use constant, cosine or onecycle)")
	case r.set["clip"] && (math.IsNaN(r.clip) || r.clip < 0):
		return fmt.Errorf("-clip %v: want a max norm > 0 (+Inf or 0: no clipping)", r.clip)
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
	warmup := r.warmup
	if r.autoWarmup {
		warmup = autoWarmup(total)
	}
	var sc *schedule.Schedule
	switch r.schedule {
	case "constant":
		if warmup > 0 {
			sc = &schedule.Schedule{Kind: "linear", StartFactor: 1 / float64(warmup), EndFactor: 1, Iters: warmup}
		}
	case "cosine":
		sc = &schedule.Schedule{Kind: "warmup_cosine", Iters: warmup, Total: total, StartFactor: 1, Min: r.minLR}
		if r.minFrac > 0 {
			sc.Min = base * r.minFrac
		}
		if warmup > 0 {
			sc.StartFactor = 1 / float64(warmup)
		}
	case "step":
		sc = &schedule.Schedule{Kind: "step", StepSize: max(total/3, 1), Gamma: 0.1}
	case "onecycle":
		pct := 0.3
		if warmup > 0 {
			pct = float64(warmup) / float64(total)
		}
		sc = &schedule.Schedule{Kind: "onecycle", Total: total, PctStart: pct, DivFactor: 25, FinalDivFactor: 1e4}
	}
	if p := sc.Check(base); p != "" {
		return nil, fmt.Errorf("-schedule %s -warmup %d over %d steps: %s", r.schedule, warmup, total, p)
	}
	return sc, nil
}

// resolve is the rate and schedule of a run of total more optimizer
// steps after done, from the current ones (a model's declared rate and
// schedule, or a checkpoint's): -lr replaces the rate, -schedule the
// schedule, spanning the whole run counted from step 1 as the step
// counter is (a resumed run's schedule covers the steps already taken).
func (r *recipe) resolve(base float64, cur *schedule.Schedule, done, total int) (float64, *schedule.Schedule, error) {
	if r.setsLR() {
		base = r.lr
	}
	if r.schedule == "" {
		return base, cur, nil
	}
	sc, err := r.plan(base, done+total)
	return base, sc, err
}

// apply sets the rate, schedule, weight decay and max norm on s for a run
// of total more optimizer steps. Without -lr, -schedule, -weight-decay,
// -clip and a default recipe it changes nothing, so the model's own, or a
// checkpoint's, run. The decay is the default group's and that of the
// groups without their own (dsl.ParamGroup): a group that declares its
// decay keeps it.
func (r *recipe) apply(s *runtime.Session, total int) error {
	if r.decay() {
		if err := s.SetWeightDecay(r.weightDecay); err != nil {
			return err
		}
	}
	if r.clipping() {
		if err := s.SetClipNorm(r.maxNorm()); err != nil {
			return fmt.Errorf("-clip %v: %w", r.clip, err)
		}
	}
	if !r.given() {
		return nil
	}
	base, cur := s.Schedule()
	// The schedule's own counter: a loss scaler's skipped steps count.
	base, sc, err := r.resolve(base, cur, s.ScheduleSteps(), total)
	if err != nil {
		return err
	}
	return s.SetSchedule(base, sc)
}

// peerArgs are the PyTorch peer's arguments for the same recipe over
// total steps from a fresh start with the plan's optimizer: the rate, the
// schedule as runtime/schedule JSON (bench/torch_train.py builds the
// torch scheduler from it with testdata/oracle/torch_lr.py's builder),
// the weight decay when there is one (-weight-decay's, or the model's),
// and the max norm of clip_grad_norm_ when the run clips (-clip's, the
// default recipe's, or the model's declared one); when the model declares
// parameter groups, the groups (runtime.GroupsJSON, as
// testdata/oracle/torch_optim.py builds them) and the model's parameter
// names in order, which the peer pairs with its model's parameters().
func (r *recipe) peerArgs(p *runtime.Plan, total int) ([]string, error) {
	o := p.Optimizer
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
	clip := o.ClipNorm
	if r.clipping() {
		clip = r.maxNorm()
	}
	if clip > 0 && !math.IsInf(clip, 1) {
		args = append(args, "--clip", fmt.Sprint(clip))
	}
	if sc != nil {
		j, err := json.Marshal(sc)
		if err != nil {
			return nil, err
		}
		args = append(args, "--schedule", string(j))
	}
	if len(o.Groups) > 0 {
		var names []string
		for _, b := range p.Buffers {
			if b.Role == "param" {
				names = append(names, b.Name)
			}
		}
		args = append(args, "--groups", runtime.GroupsJSON(o.Groups), "--param-names", strings.Join(names, ","))
	}
	return args, nil
}

// describe prints the run's recipe when a flag or a default recipe set
// part of it.
func (r *recipe) describe(s *runtime.Session, total int, say func(string, ...any)) {
	if r.given() {
		base, sc := s.Schedule()
		say("learning rate %g, schedule %s over %d steps\n", base, sc, total)
	}
	if r.clipping() {
		if c := s.ClipNorm(); math.IsInf(c, 1) {
			say("no gradient clipping\n")
		} else {
			say("gradients clipped to global norm %g (clip_grad_norm_)\n", c)
		}
	}
}
