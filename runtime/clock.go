package runtime

import (
	"fmt"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime/schedule"
)

// The device clock. A guarded training plan holds a small persistent
// buffer (role "clock", float64 words) with everything that changes from
// one step to the next: the step counters, the loss scaler, the update
// check's bound, the learning-rate schedule and, computed from them, the
// scalars of the next step (Adam's step_size and bias correction, AdamW's
// decay, SGD's rate, the loss scale and its inverse, dropout's step, the
// update check's gsafe). Kernels read those scalars from the clock
// instead of taking them as arguments, so every launch of a training
// step has the same arguments at every step, and a CUDA graph replays a
// scheduled step with no kernel-argument update.
//
// The clock kernel (ClockKernel, codegen/clock.go), the last launch of
// the update phase, reads the status block: after a good step it advances
// the counters, the scaler and the bound exactly as the host's mirrors
// advance, then computes the next step's scalars (schedule.Rate ported to
// C). The host writes the clock only when something changes outside a
// good step (New, Load, SetLR, SetSchedule, SetWeightDecay, WriteFloats,
// a skipped or failed step), and then runs the same kernel without
// advancing (syncClock): a few words and one launch, off the hot path.
const (
	ClockT        = 0 // completed optimizer steps (Adam's t)
	ClockU        = 1 // completed schedule steps (ScheduleSteps)
	ClockScale    = 2 // the loss scale of the next step (an f32 value)
	ClockTracker  = 3 // the scaler's growth tracker
	ClockScaler   = 4 // 1: dynamic loss scaling is on
	ClockGrowth   = 5 // the scaler's growth factor, backoff and interval
	ClockBackoff  = 6
	ClockInterval = 7
	ClockBoundOff = 8 // 1: no bound, the update check checks every element (gsafe -1)
	ClockBase     = 9 // the optimizer's run-time rate (SetLR, SetSchedule's base)
	ClockWD       = 10
	// ClockSched holds the schedule: its kind (clockKinds, 0: constant
	// rate), then its numbers in clockSchedFields' order, the number of
	// milestones and the milestones.
	ClockSched      = 11
	clockSchedNums  = 15
	ClockMilestones = ClockSched + 1 + clockSchedNums // count, then MaxMilestones
	// ClockBound holds the update check's bound: |parameters|, |first
	// state|, |second state| (update_bound.go).
	ClockBound = ClockMilestones + 1 + schedule.MaxMilestones
	// ClockOut is the first of the next step's scalars (ClockSlot).
	ClockOut = ClockBound + 3
)

// ClockGlobals are the next step's scalars that are not a parameter
// group's, in slot order from ClockOut.
var ClockGlobals = []string{"step", LossScaleScalar, InvScaleScalar, "gsafe"}

// ClockGroupScalars are one parameter group's scalars, in slot order
// (runtime Optimizer.ScalarsAt computes the same on the host).
var ClockGroupScalars = []string{"lr", "step_size", "bc2_sqrt", "decay", "wd", "mom", "damp"}

// ClockWords is the clock's size for optimizer o.
func ClockWords(o Optimizer) int64 {
	return int64(ClockOut + len(ClockGlobals) + len(ClockGroupScalars)*len(o.Rules()))
}

// ClockSlot is the clock word of the next step's scalar name, or -1 when
// the clock does not hold it.
func ClockSlot(o Optimizer, name string) int {
	for i, g := range ClockGlobals {
		if name == g {
			return ClockOut + i
		}
	}
	for gi, r := range o.Rules() {
		for i, s := range ClockGroupScalars {
			if name == s+r.Suffix {
				return ClockOut + len(ClockGlobals) + gi*len(ClockGroupScalars) + i
			}
		}
	}
	return -1
}

// ClockKinds numbers the schedule kinds as the clock kernel's switch
// does (0: no schedule).
var ClockKinds = map[string]int{"step": 1, "multistep": 2, "exponential": 3, "constant": 4, "linear": 5, "cosine": 6, "onecycle": 7, "warmup_cosine": 8}

// clockSchedFields is a schedule's numbers in clock order (ClockSched+1 on).
func clockSchedFields(sc *schedule.Schedule) [clockSchedNums]float64 {
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	return [clockSchedNums]float64{float64(sc.StepSize), sc.Gamma, sc.Factor, sc.StartFactor, sc.EndFactor, float64(sc.Iters),
		float64(sc.TMax), sc.Min, float64(sc.Total), sc.PctStart, sc.DivFactor, sc.FinalDivFactor, b(sc.Linear), b(sc.ThreePhase), 0}
}

// ClockKernel (Buf: the status block, Src: the clock), the update phase's
// last launch, advances the clock after a good step and computes the
// next step's scalars; with its "advance" argument 0 (syncClock) it only
// computes them.
const ClockKernel = "clock"

// ClockBuffer is the plan's clock buffer, or -1 for a plan without one.
func (p *Plan) ClockBuffer() int {
	for i := range p.Buffers {
		if p.Buffers[i].Role == "clock" {
			return i
		}
	}
	return -1
}

// clockBuf is the session's clock buffer, or -1 for a plan without one.
func (s *Session) clockBuf() int { return s.clock.buf }

// clockState is the session's side of the device clock.
type clockState struct {
	buf        int  // the clock buffer (Plan.ClockBuffer), -1: none
	dirty      bool // the host's state changed: syncClock before the next launch
	boundDirty bool // s.bound holds maxima the device has not seen
	boundOff   bool // the clock's ClockBoundOff as last written
	step       *Step
	words      []float64 // scratch for the host's words
}

// markClock notes that the host's counters, scaler, rate or decay
// changed outside a good step: the clock is rewritten before the next
// launch.
func (s *Session) markClock() { s.clock.dirty = true }

// syncClock writes the host's state into the clock, when it changed, and
// runs the clock kernel without advancing, so that the next step's
// scalars follow it.
func (s *Session) syncClock() error {
	cb := s.clockBuf()
	if cb < 0 || !s.clock.dirty && !s.clock.boundDirty {
		return nil
	}
	if s.clock.step == nil {
		_, f, err := s.fn("step")
		if err != nil {
			return err
		}
		for i := range f.Steps {
			if f.Steps[i].Builtin == ClockKernel {
				st := f.Steps[i]
				st.Args = append([]ArgRef(nil), st.Args...)
				for j := range st.Args {
					if st.Args[j].Scalar == "" && st.Args[j].Buf < 0 {
						st.Args[j].Const = 0 // advance: no
					}
				}
				s.clock.step = &st
			}
		}
		if s.clock.step == nil {
			return fmt.Errorf("%s: the plan has a clock but no clock kernel; regenerate the package", s.plan.Model)
		}
	}
	if s.clock.dirty {
		w := s.clockWords()
		if err := s.dev.CopyToDevice(s.ptrs[cb], unsafe.Pointer(&w[0]), int64(len(w))*8); err != nil {
			return fmt.Errorf("%s: writing the clock: %w", s.plan.Model, err)
		}
	}
	if s.clock.boundDirty {
		b := [3]float64{s.bound.p, s.bound.s1, s.bound.s2}
		if err := s.dev.CopyToDevice(s.ptrs[cb]+Ptr(ClockBound*8), unsafe.Pointer(&b[0]), 3*8); err != nil {
			return fmt.Errorf("%s: writing the clock: %w", s.plan.Model, err)
		}
	}
	if err := s.exec(s.clock.step, nil); err != nil {
		return fmt.Errorf("%s: the clock kernel: %w", s.plan.Model, err)
	}
	s.clock.dirty, s.clock.boundDirty = false, false
	return nil
}

// clockWords are the host's words of the clock, ClockT up to ClockBound.
func (s *Session) clockWords() []float64 {
	if s.clock.words == nil {
		s.clock.words = make([]float64, ClockBound)
	}
	w := s.clock.words
	clear(w)
	w[ClockT], w[ClockU] = float64(s.t), float64(s.schedT)
	if l := &s.scaler; l.on {
		w[ClockScale], w[ClockTracker], w[ClockScaler] = float64(l.scale), float64(l.tracker), 1
		w[ClockGrowth], w[ClockBackoff], w[ClockInterval] = l.cfg.GrowthFactor, l.cfg.BackoffFactor, float64(l.cfg.GrowthInterval)
	} else {
		w[ClockScale] = 1
	}
	if s.clock.boundOff = s.boundOff(); s.clock.boundOff {
		w[ClockBoundOff] = 1 // the guard's largest gradient is not the update's
	}
	w[ClockBase], w[ClockWD] = s.lr, s.wd
	if sc := s.sched; sc != nil {
		w[ClockSched] = float64(ClockKinds[sc.Kind])
		f := clockSchedFields(sc)
		copy(w[ClockSched+1:], f[:])
		w[ClockMilestones] = float64(len(sc.Milestones))
		for i, m := range sc.Milestones {
			w[ClockMilestones+1+i] = float64(m)
		}
	}
	return w
}

// boundOff is the clock's ClockBoundOff for the update about to run:
// without a bound of the update's gradient (an accumulated sum, an
// all-reduce) the update check checks every element.
func (s *Session) boundOff() bool { return !s.bound.on || s.acc.inSum || s.dp.comm != nil }

// syncClockForUpdate is syncClock before an update phase, which also
// rewrites the clock when the bound turns on or off (the first update of
// an accumulation, joining a data-parallel group).
func (s *Session) syncClockForUpdate() error {
	if s.boundOff() != s.clock.boundOff {
		s.markClock()
	}
	return s.syncClock()
}

// initClock looks the clock up and marks it for writing before the first
// launch. A training plan with an update check and no clock is from
// before the clock: its kernels take the step's scalars as arguments,
// which this runtime no longer computes.
func (s *Session) initClock() error {
	if s.clockBuf() < 0 {
		if _, f, err := s.fn("step"); err == nil && hasBuiltin(f, UpdateCheckKernel) {
			return fmt.Errorf("%s: the plan has no device clock (it is from before the clock kernel); regenerate the package", s.plan.Model)
		}
		return nil
	}
	s.clock.dirty, s.clock.boundDirty = true, s.bound.on
	return nil
}

// ReadClock reads the clock's words (tests, and the host's checks of its
// mirrors); nil for a plan without one.
func (s *Session) ReadClock() ([]float64, error) {
	cb := s.clockBuf()
	if cb < 0 {
		return nil, nil
	}
	if err := s.Flush(); err != nil {
		return nil, err
	}
	if err := s.syncClock(); err != nil {
		return nil, err
	}
	w := make([]float64, s.plan.Buffers[cb].Elems.Mul)
	if err := s.dev.CopyToHost(unsafe.Pointer(&w[0]), s.ptrs[cb], int64(len(w))*8); err != nil {
		return nil, err
	}
	return w, nil
}

// readBound reads the bound the clock holds into s.bound.
func (s *Session) readBound() error {
	cb := s.clockBuf()
	if cb < 0 || s.clock.boundDirty {
		return nil
	}
	var b [3]float64
	if err := s.dev.CopyToHost(unsafe.Pointer(&b[0]), s.ptrs[cb]+Ptr(ClockBound*8), 3*8); err != nil {
		return err
	}
	s.bound.p, s.bound.s1, s.bound.s2 = b[0], b[1], b[2]
	return nil
}
