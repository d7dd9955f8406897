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
// a scalar the host computes before the step: the largest G for which a
// bound on every new value stays below half the largest finite value of
// the parameters' type, the margin the exact check also uses. When
// G ≤ gsafe the check returns at once; otherwise it computes every new
// value and records their largest magnitudes.
//
// The bound starts from host-side upper bounds on |parameter| and on
// each optimizer state vector (updateBound): exact maxima after New,
// Load and WriteFloats, the maxima the check recorded after a step it
// checked element by element, and the bound itself after a step it did
// not. Each operation of the update is bounded in float64 with a
// relative slack of 2^-20 per rounding (float32 rounds to 2^-24), so
// the bound holds for the kernels' float32 or float64 arithmetic. With
// gradient accumulation or an all-reduce the guard's G is not the
// update's, and gsafe is -1: every element is checked.

// updateBound bounds the magnitudes of the state the update reads.
type updateBound struct {
	on     bool               // the plan has an update check
	status int                // the status block's buffer
	p      float64            // ≥ |every parameter|
	s1, s2 float64            // ≥ |the first (exp_avg, momentum_buffer) and second (exp_avg_sq) state vectors|
	sc     map[string]float64 // the scalars of the update in flight
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
	return nil
}

// raiseBound makes the bound cover vals, just written into buffer i (a
// parameter, the flat parameters or a state vector).
func (s *Session) raiseBound(i int, vals []float64) {
	if !s.bound.on {
		return
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
	}
}

// boundLimit is the largest magnitude the exact check lets a new value
// have: half the type's largest finite value.
func (s *Session) boundLimit() float64 {
	if s.plan.DType == F64 {
		return math.MaxFloat64 / 2
	}
	return math.MaxFloat32 / 2
}

// next bounds the state after one update with |gradient| ≤ g and the
// step's scalars sc, or returns false when it cannot: an intermediate
// value might overflow the kernels' type (g·g in float32 for g > 1.8e19,
// though (1-β2)·g·g would fit), or an eps the kernels may flush to zero.
// The bound b covers every element, so each parameter group's update is
// bounded from it and the new bound is the largest of theirs.
func (s *Session) next(b updateBound, g float64, sc map[string]float64) (updateBound, bool) {
	var out updateBound
	out.on, out.status, out.sc = b.on, b.status, b.sc
	for _, rule := range s.groupRules() {
		nb, ok := s.nextGroup(b, g, sc, rule)
		if !ok {
			return b, false
		}
		out.p, out.s1, out.s2 = max(out.p, nb.p), max(out.s1, nb.s1), max(out.s2, nb.s2)
	}
	return out, true
}

// nextGroup is next for one parameter group's update.
func (s *Session) nextGroup(b updateBound, g float64, sc map[string]float64, rule GroupRule) (updateBound, bool) {
	o := s.plan.Optimizer
	k := func(name string) float64 { return sc[name+rule.Suffix] }
	tiny, top := 0x1p-126, math.MaxFloat32 // below tiny the kernels may flush a value to zero
	if s.plan.DType == F64 {
		tiny, top = 0x1p-1022, math.MaxFloat64
	}
	top /= 1 + 8*boundSlack
	ok := true
	// r bounds one rounded operation's result and checks that it cannot
	// overflow.
	r := func(x float64) float64 {
		x = up(x, 1)
		if !(x <= top) {
			ok = false
		}
		return x
	}
	// c bounds a constant or scalar as the kernels' type holds it.
	c := func(x float64) float64 { return up(math.Abs(x), 1) }
	switch o.Kind {
	case "adam", "adamw":
		gd := g
		if o.Kind == "adam" {
			gd = r(g + r(b.p*c(k("wd"))))
		}
		// m2 = m·β1 + g·(1-β1); v2 = v·β2 + (g·g)·(1-β2)
		b.s1 = r(r(b.s1*c(rule.Beta1)) + r(gd*c(1-rule.Beta1)))
		b.s2 = r(r(b.s2*c(rule.Beta2)) + r(r(gd*gd)*c(1-rule.Beta2)))
		r(r(math.Sqrt(b.s2)) / (math.Abs(k("bc2_sqrt")) * (1 - 2*boundSlack)))
		// den = sqrt(v2)/bc2_sqrt + eps ≥ eps, rounded.
		eps := o.Eps
		if s.plan.DType == F32 {
			eps = float64(float32(eps))
		}
		if eps < tiny {
			return b, false
		}
		ratio := r(b.s1 / (eps * (1 - 4*boundSlack)))
		p0 := b.p
		if o.Kind == "adamw" {
			p0 = r(b.p * c(k("decay")))
		}
		b.p = r(p0 + r(c(k("step_size"))*ratio))
	case "sgd":
		d := r(g + r(b.p*c(k("wd"))))
		if rule.Momentum != 0 {
			b.s1 = r(r(c(k("mom"))*b.s1) + r(c(k("damp"))*d))
			if o.Nesterov {
				d = r(d + r(b.s1*c(rule.Momentum)))
			} else {
				d = b.s1
			}
		}
		b.p = r(b.p + r(c(k("lr"))*d))
	default:
		return b, false
	}
	return b, ok
}

// clipped is the largest |gradient| the update reads when the guard's is
// g: at most the optimizer's ClipValue.
func (s *Session) clipped(g float64) float64 {
	if c := s.plan.Optimizer.ClipValue; c > 0 && !(g <= c) {
		return c
	}
	return g
}

// gsafe is the largest |gradient| for which next's bound stays within
// the limit, in the kernels' type and rounded down, or -1 when no
// gradient is safe or the update's gradient is not the guard's.
func (s *Session) gsafe(sc map[string]float64) float64 {
	if !s.bound.on || s.acc.inSum || s.dp.comm != nil {
		return -1
	}
	lim := s.boundLimit()
	ok := func(g float64) bool {
		b, fine := s.next(s.bound, g, sc)
		return fine && b.p <= lim && b.s1 <= lim && b.s2 <= lim
	}
	if !ok(0) {
		return -1
	}
	if c := s.plan.Optimizer.ClipValue; c > 0 && ok(c) {
		// Every gradient is clamped to a safe one; +Inf covers the
		// guard's record of an f64 gradient beyond float32's range.
		return math.Inf(1)
	}
	// Binary search over the bits of non-negative float64s, whose order
	// is the values' order; ok is monotone in g.
	lo, hi := uint64(0), math.Float64bits(math.MaxFloat64)
	if ok(math.MaxFloat64) {
		lo = hi
	}
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if ok(math.Float64frombits(mid)) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	g := math.Float64frombits(lo)
	if s.plan.DType == F32 {
		// The kernel compares in float32: round down.
		f := float32(g)
		if float64(f) > g {
			f = math.Nextafter32(f, 0)
		}
		g = float64(f)
	}
	return g
}

// afterUpdate moves the bound past a step that succeeded, from the status
// block the step's check read: the maxima the update check recorded when
// it checked every element, else next's bound at the guard's gradient.
func (s *Session) afterUpdate() {
	if !s.bound.on || s.bound.sc == nil {
		return
	}
	sc := s.bound.sc
	s.bound.sc = nil
	w := func(i int) float64 { return float64(math.Float32frombits(uint32(s.status[i]))) }
	if s.status[statusFullPass] != 0 {
		// The check's arithmetic may round unlike the update's (FMA).
		s.bound.p, s.bound.s1, s.bound.s2 = up(w(statusMaxNew), 4), up(w(statusMaxNew+1), 4), up(w(statusMaxNew+2), 4)
		return
	}
	if b, ok := s.next(s.bound, s.clipped(s.unscaledMax(w(statusMaxGrad))), sc); ok {
		s.bound = b
		return
	}
	s.bound.p, s.bound.s1, s.bound.s2 = math.Inf(1), math.Inf(1), math.Inf(1) // check every element until the next refresh
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
