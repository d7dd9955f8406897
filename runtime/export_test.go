package runtime

// Hooks for the external tests (runtime_test): the host's reference
// computations the device clock (clock.go) ports to C.

// ClockRef is what the host computes for the next step from the session's
// counters, rate, decay and scaler, with the update check's bound clk
// holds: the next step's scalars by name (Optimizer.ScalarsAt and the
// clock's globals) and gsafe (the reference in bound_ref_test.go), which
// is -1 when the clock says the update's gradient is a sum (the host
// writes that word before an accumulated update).
func ClockRef(s *Session, clk []float64) map[string]float64 {
	saved, inSum := s.bound, s.acc.inSum
	defer func() { s.bound, s.acc.inSum = saved, inSum }()
	s.bound.p, s.bound.s1, s.bound.s2 = clk[ClockBound], clk[ClockBound+1], clk[ClockBound+2]
	s.acc.inSum = clk[ClockBoundOff] != 0 && s.dp.comm == nil
	sc := s.plan.Optimizer.ScalarsAt(map[string]float64{}, s.groupRules(), s.t+1, s.schedT+1, s.lr, s.sched, s.wd)
	sc["step"] = float64(s.t + 1)
	sc[LossScaleScalar], sc[InvScaleScalar] = 1, 1
	if s.scaler.on {
		sc[LossScaleScalar], sc[InvScaleScalar] = float64(s.scaler.scale), float64(s.scaler.invScale())
	}
	if s.bound.on {
		sc["gsafe"] = s.scaledGSafe(s.gsafe(sc))
	}
	return sc
}

// BoundAfterRef is the host's reference bound after the good step that
// just ran, from the clock before it (its bound, the step's scalars and
// loss scale) and the status block the step's check read.
func BoundAfterRef(s *Session, before []float64) [3]float64 {
	savedB, savedS := s.bound, s.scaler
	defer func() { s.bound, s.scaler = savedB, savedS }()
	s.bound.p, s.bound.s1, s.bound.s2 = before[ClockBound], before[ClockBound+1], before[ClockBound+2]
	s.scaler.scale = float32(before[ClockScale])
	sc := map[string]float64{}
	for name := range ClockRef(s, before) {
		if i := ClockSlot(s.plan.Optimizer, name); i >= 0 {
			sc[name] = before[i]
		}
	}
	s.afterUpdate(sc)
	return [3]float64{s.bound.p, s.bound.s1, s.bound.s2}
}

// SetCounters sets the host's step and schedule counters, as a
// checkpoint's Load does, so that the next ReadClock rewrites the clock
// and computes step t+1's scalars at schedule step u+1.
func SetCounters(s *Session, t, u int) {
	s.t, s.schedT = t, u
	s.markClock()
}

// BufPtr is buffer i's device pointer (tests).
func BufPtr(s *Session, i int) Ptr { return s.ptrs[i] }
