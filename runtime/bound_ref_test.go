package runtime

import "math"

// groupRules is the optimizer's group rules.
func (s *Session) groupRules() []GroupRule { return s.plan.Optimizer.Rules() }

// The update check's bound as the host once computed it before every
// step, kept as the reference the clock kernel (codegen/clock.go) ports
// to C: TestUpdateBoundSound proves it sound, and codegen/jit's
// TestClockBound holds the device's gsafe and bound to it.

// next bounds the state after one update with |gradient| ≤ g and the
// step's scalars sc, or returns false when it cannot: an intermediate
// value might overflow the kernels' type (g·g in float32 for g > 1.8e19,
// though (1-β2)·g·g would fit), or an eps the kernels may flush to zero.
// The bound b covers every element, so each parameter group's update is
// bounded from it and the new bound is the largest of theirs.
func (s *Session) next(b updateBound, g float64, sc map[string]float64) (updateBound, bool) {
	var out updateBound
	out.on, out.status = b.on, b.status
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

// afterUpdate moves the bound past a step that succeeded, whose scalars
// were sc, from the status block the step's check read: the maxima the
// update check recorded when it checked every element, else next's bound
// at the guard's gradient.
func (s *Session) afterUpdate(sc map[string]float64) {
	if !s.bound.on {
		return
	}
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

// scaledGSafe is the update check's gsafe for the scaled gradients the
// guard measured: gsafe·scale rounded down in f32.
func (s *Session) scaledGSafe(g float64) float64 {
	if !s.scaler.on || g < 0 || math.IsInf(g, 1) {
		return g
	}
	x := g * float64(s.scaler.scale)
	f := float32(x)
	if float64(f) > x {
		f = math.Nextafter32(f, 0)
	}
	return float64(f)
}

// unscaledMax bounds the unscaled magnitude of a scaled one, rounded up.
func (s *Session) unscaledMax(g float64) float64 {
	if !s.scaler.on {
		return g
	}
	return up(g*float64(s.scaler.invScale()), 1)
}
