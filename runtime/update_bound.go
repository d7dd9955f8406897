package runtime

import (
	"fmt"
	"math"
)

// The update check (UpdateCheckKernel, compiler/guard.go) fails a step
// whose optimizer update would make a parameter or the optimizer's state
// non-finite. Computing the update twice for every element would cost
// about as much as the update itself (15% of the seed MLP's CPU step), so
// the check first compares the step's largest |gradient| G, which the
// guard kernel records while it reads the gradients anyway, with gsafe,
// a scalar the clock kernel computes before the step (clock.go,
// codegen/clock.go; bound_ref_test.go keeps the Go reference it ports,
// which TestUpdateBoundSound proves sound): the largest G for which a
// bound on every new value stays below half the largest finite value of
// the parameters' type, the margin the exact check also uses. When
// G ≤ gsafe the check returns at once; otherwise it computes every new
// value and records their largest magnitudes.
//
// The bound starts from upper bounds on |parameter| and on each
// optimizer state vector, in the device clock: exact maxima the host
// takes after New, Load and WriteFloats (updateBound, written into the
// clock), then, advanced by the clock kernel, the maxima the check
// recorded after a step it checked element by element, and the bound
// itself after a step it did not. Each operation of the update is bounded in float64 with a
// relative slack of 2^-20 per rounding (float32 rounds to 2^-24), so
// the bound holds for the kernels' float32 or float64 arithmetic. With
// gradient accumulation or an all-reduce the guard's G is not the
// update's, and gsafe is -1: every element is checked.

// updateBound bounds the magnitudes of the state the update reads.
type updateBound struct {
	on     bool    // the plan has an update check
	status int     // the status block's buffer
	p      float64 // ≥ |every parameter|
	s1, s2 float64 // ≥ |the first (exp_avg, momentum_buffer) and second (exp_avg_sq) state vectors|
}

// boundSlack is the relative error allowed per rounded operation.
const boundSlack = 0x1p-20

// up is x grown by k roundings.
func up(x float64, k int) float64 {
	for ; k > 0; k-- {
		x *= 1 + boundSlack
	}
	return x
}

// initBound notes whether the plan checks its update and takes the exact
// maxima of the state it reads.
func (s *Session) initBound() error {
	_, f, err := s.fn("step")
	if err != nil || !hasBuiltin(f, UpdateCheckKernel) {
		return nil
	}
	st, err := s.Lookup("status", "status")
	if err != nil {
		return err
	}
	if s.plan.Buffers[st].Elems.Mul < StatusWords {
		return fmt.Errorf("%s: the status block has %d words, the update check needs %d", s.plan.Model, s.plan.Buffers[st].Elems.Mul, StatusWords)
	}
	s.bound.on, s.bound.status = true, st
	return s.refreshBound()
}

// boundVectors are the buffers the update reads besides the gradients:
// the flat parameters and the optimizer's first and second state.
func (s *Session) boundVectors() (p, s1, s2 int) {
	p, s1, s2 = -1, -1, -1
	k := s.plan.Optimizer.Kind
	for i := range s.plan.Buffers {
		b := &s.plan.Buffers[i]
		switch {
		case b.Role == "params":
			p = i
		case b.Role == "state" && (b.Name == k+".exp_avg" || b.Name == k+".momentum_buffer"):
			s1 = i
		case b.Role == "state" && b.Name == k+".exp_avg_sq":
			s2 = i
		}
	}
	return p, s1, s2
}

// refreshBound reads the parameters and the optimizer's state and takes
// their exact maxima (after New, Load, WriteFloats).
func (s *Session) refreshBound() error {
	if !s.bound.on {
		return nil
	}
	p, s1, s2 := s.boundVectors()
	var m [3]float64
	for k, buf := range []int{p, s1, s2} {
		if buf < 0 {
			continue
		}
		v, err := s.ReadFloats(buf)
		if err != nil {
			return err
		}
		for _, x := range v {
			m[k] = max(m[k], math.Abs(x)) // a NaN stays out; Load and WriteFloats refuse them
		}
	}
	s.bound.p, s.bound.s1, s.bound.s2 = m[0], m[1], m[2]
	s.clock.boundDirty = true
	return nil
}

// raiseBound makes the bound cover vals, just written into buffer i (a
// parameter, the flat parameters or a state vector).
func (s *Session) raiseBound(i int, vals []float64) error {
	if !s.bound.on {
		return nil
	}
	if err := s.readBound(); err != nil {
		return err
	}
	m := 0.0
	for _, x := range vals {
		m = max(m, math.Abs(x))
	}
	p, s1, s2 := s.boundVectors()
	root := i
	for s.plan.Buffers[root].Placement == Alias {
		root = s.plan.Buffers[root].AliasOf
	}
	switch root {
	case p:
		s.bound.p = max(s.bound.p, m)
	case s1:
		s.bound.s1 = max(s.bound.s1, m)
	case s2:
		s.bound.s2 = max(s.bound.s2, m)
	default:
		return nil
	}
	s.clock.boundDirty = true
	return nil
}

// boundLimit is the largest magnitude the exact check lets a new value
// have: half the type's largest finite value.
func (s *Session) boundLimit() float64 {
	if s.plan.DType == F64 {
		return math.MaxFloat64 / 2
	}
	return math.MaxFloat32 / 2
}

// UpdateCheckFull reports whether the last step's update check computed
// every element's update (true) or found the step covered by its bound
// (false: the check cost one comparison). It is false for plans without
// an update check, and after a step that failed before its update.
func (s *Session) UpdateCheckFull() bool {
	return s != nil && s.bound.on && s.status[statusFullPass] != 0
}

// clearScratch zeroes the status block's per-step words before a
// gradient phase.
func (s *Session) clearScratch() error {
	if !s.bound.on {
		return nil
	}
	return s.dev.Memset(s.ptrs[s.bound.status]+Ptr(statusMaxGrad*4), 0, (StatusWords-statusMaxGrad)*4)
}
