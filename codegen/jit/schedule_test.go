package jit

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// scheduleRig is a small dropout MLP with a learning-rate schedule in its
// plan, and the same MLP without one, trained on one fixed batch.
type scheduleRig struct {
	t            *testing.T
	dev          runtime.Device
	sched, plain *compiler.Program
	x            []float32
	y            []int32
	batch        int
	sc           schedule.Schedule
	base         float64
}

func newScheduleRig(t *testing.T, opt ir.Optimizer, sc schedule.Schedule) *scheduleRig {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	const in, width, classes, batch = 12, 16, 5, 8
	r := &scheduleRig{t: t, dev: dev, batch: batch, sc: sc, base: opt.LR}
	plain := opt
	opt.Schedule = &sc
	for _, c := range []struct {
		dst **compiler.Program
		o   ir.Optimizer
	}{{&r.sched, opt}, {&r.plain, plain}} {
		p, err := compiler.Compile(irtest.DeepMLP(ir.F32, in, width, 2, classes, 0.2, c.o, 0), compiler.Options{Fuse: true})
		if err != nil {
			t.Fatal(err)
		}
		*c.dst = p
	}
	rng := rand.New(rand.NewPCG(5, 6))
	r.x = make([]float32, batch*in)
	r.y = make([]int32, batch)
	for i := range r.x {
		r.x[i] = float32(rng.NormFloat64())
	}
	for i := range r.y {
		r.y[i] = int32(rng.IntN(classes))
	}
	return r
}

func (r *scheduleRig) session(p *compiler.Program) *runtime.Session {
	s, err := Session(r.dev, p, runtime.SessionOptions{MaxBatch: r.batch, Seed: 9})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { s.Close() })
	return s
}

// steps runs n training steps; before each, at, when set, runs with the
// step number about to run (from 1).
func (r *scheduleRig) steps(s *runtime.Session, n int, at func(t int)) {
	r.t.Helper()
	for range n {
		if at != nil {
			at(s.Steps() + 1)
		}
		if err := s.WriteInput("x", r.x, r.batch); err != nil {
			r.t.Fatal(err)
		}
		if err := s.WriteInput("y", r.y, r.batch); err != nil {
			r.t.Fatal(err)
		}
		if err := s.Run("step", r.batch); err != nil {
			r.t.Fatal(err)
		}
	}
}

// bits is every parameter and optimizer state, bit for bit (a checkpoint
// without its metadata would do, but this names what differs).
func (r *scheduleRig) bits(s *runtime.Session) map[string][]uint64 {
	out := map[string][]uint64{}
	for _, role := range []string{"param", "state"} {
		for _, n := range s.Names(role) {
			i, _ := s.Lookup(role, n)
			v, err := s.ReadFloats(i)
			if err != nil {
				r.t.Fatal(err)
			}
			for _, f := range v {
				out[role+" "+n] = append(out[role+" "+n], math.Float64bits(f))
			}
		}
	}
	return out
}

func (r *scheduleRig) same(what string, got, want map[string][]uint64) {
	r.t.Helper()
	if len(got) != len(want) {
		r.t.Fatalf("%s: %d buffers, want %d", what, len(got), len(want))
	}
	for n, w := range want {
		if !slices.Equal(got[n], w) {
			r.t.Errorf("%s: %s differs", what, n)
		}
	}
}

var warmupCosine = schedule.Schedule{Kind: "warmup_cosine", Iters: 3, Total: 9, Min: 1e-4, StartFactor: 0.25}

// TestScheduleIsPerStepRate: a plan's schedule trains exactly as the
// same plan without one driven by SetLR(rate of the step) before every
// step: the schedule only chooses the scalars the update already takes.
// LR() reports the rate of the step about to run.
func TestScheduleIsPerStepRate(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  ir.Optimizer
		sc   schedule.Schedule
	}{
		{"adam_warmup_cosine", irtest.Adam, warmupCosine},
		{"adamw_onecycle", ir.Optimizer{Kind: "adamw", LR: 2e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.05},
			schedule.Schedule{Kind: "onecycle", Total: 10, PctStart: 0.3, DivFactor: 25, FinalDivFactor: 1e4}},
		{"sgd_multistep", ir.Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.9}, schedule.Schedule{Kind: "multistep", Milestones: []int{2, 5}, Gamma: 0.3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newScheduleRig(t, c.opt, c.sc)
			a := r.session(r.sched)
			r.steps(a, 10, func(step int) {
				if got, want := a.LR(), c.sc.Rate(c.opt.LR, step-1); got != want {
					t.Fatalf("step %d: LR() %g, want %g", step, got, want)
				}
			})
			b := r.session(r.plain)
			r.steps(b, 10, func(step int) {
				if err := b.SetLR(c.sc.Rate(c.opt.LR, step-1)); err != nil {
					t.Fatal(err)
				}
			})
			r.same("schedule vs SetLR each step", r.bits(a), r.bits(b))
			// And the schedule mattered: a constant rate ends elsewhere.
			k := r.session(r.plain)
			r.steps(k, 10, nil)
			if got, want := r.bits(a), r.bits(k); maps64Equal(got, want) {
				t.Fatal("the schedule changed nothing")
			}
		})
	}
}

func maps64Equal(a, b map[string][]uint64) bool {
	for n := range a {
		if !slices.Equal(a[n], b[n]) {
			return false
		}
	}
	return len(a) == len(b)
}

// TestScheduleResume: a run saved mid-schedule (mid warm-up, and again in
// the cosine) and resumed in a fresh session ends where the
// uninterrupted run ends, bit for bit.
func TestScheduleResume(t *testing.T) {
	r := newScheduleRig(t, irtest.Adam, warmupCosine)
	whole := r.session(r.sched)
	r.steps(whole, 11, nil)
	s := r.session(r.sched)
	for _, n := range []int{2, 4, 5} { // saves after steps 2, 6 and 11
		r.steps(s, n, nil)
		var buf bytes.Buffer
		if err := s.Save(&buf); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), `"ngen.schedule":"{\"kind\":\"warmup_cosine\"`) {
			t.Fatalf("the checkpoint does not carry the schedule")
		}
		s = r.session(r.sched)
		// A fresh session runs the plan's schedule from step 1: what it
		// resumes comes from the file.
		if err := s.Load(&buf); err != nil {
			t.Fatal(err)
		}
	}
	if s.Steps() != 11 || s.LR() != whole.LR() {
		t.Fatalf("resumed at step %d with rate %g; the whole run is at %d, %g", s.Steps(), s.LR(), whole.Steps(), whole.LR())
	}
	r.same("resumed", r.bits(s), r.bits(whole))
}

// TestSetLROverridesSchedule: SetLR replaces the schedule with a constant
// rate, a checkpoint records that, and SetSchedule brings one back where
// the step counter is.
func TestSetLROverridesSchedule(t *testing.T) {
	r := newScheduleRig(t, irtest.Adam, warmupCosine)
	s := r.session(r.sched)
	r.steps(s, 4, nil)
	if err := s.SetLR(5e-4); err != nil {
		t.Fatal(err)
	}
	r.steps(s, 3, func(int) {
		if s.LR() != 5e-4 {
			t.Fatalf("after SetLR the rate is %g, want 5e-4", s.LR())
		}
	})
	var buf bytes.Buffer
	if err := s.Save(&buf); err != nil {
		t.Fatal(err)
	}
	f := r.session(r.sched)
	if err := f.Load(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if base, sc := f.Schedule(); sc != nil || base != 5e-4 || f.LR() != 5e-4 {
		t.Fatalf("loaded an overridden run: base %g, schedule %v, LR %g; want the constant 5e-4", base, sc, f.LR())
	}
	if err := f.SetSchedule(irtest.Adam.LR, &warmupCosine); err != nil {
		t.Fatal(err)
	}
	if got, want := f.LR(), warmupCosine.Rate(irtest.Adam.LR, 7); got != want {
		t.Fatalf("SetSchedule at step 7: LR %g, want %g", got, want)
	}
	bad := warmupCosine
	bad.Total = 2
	if err := f.SetSchedule(1e-3, &bad); err == nil || !strings.Contains(err.Error(), "warm-up 3, total 2") {
		t.Fatalf("SetSchedule with total < warm-up: %v", err)
	}
	if got, want := f.LR(), warmupCosine.Rate(irtest.Adam.LR, 7); got != want {
		t.Fatalf("a refused SetSchedule changed the rate to %g", got)
	}
}
