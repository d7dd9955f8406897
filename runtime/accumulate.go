package runtime

import (
	"fmt"
	"unsafe"
)

// A training step has two phases, split at Func.UpdateFrom: the gradient
// phase (forward and backward; the gradients land in the flat "grads"
// vector) and the update phase (the one fused optimizer kernel). Run
// ("step") runs both; RunGrads and RunUpdate run them separately, so that
// the gradients of several micro-batches can be summed before one update
// (gradient accumulation), or reduced across processes in between.
//
// Accumulation keeps the gradient kernels as they are (they write the
// grads vector, they do not add to it) and sums into a second vector of
// the same size:
//   - the first micro-batch's gradient stays in grads;
//   - before the next micro-batch overwrites grads, the pending gradient
//     is added into the sum (a copy the first time);
//   - RunUpdate puts (sum + grads)/n into grads, n the number of
//     micro-batches, and runs the update: the mean of the micro-batches'
//     gradients, which is what scaling each micro-batch's loss by 1/n
//     gives, since backward is linear (exact when n is a power of two).
//
// A micro-batch whose checks fail (a label out of range, a non-finite
// loss) is neither added nor counted: its gradient is still in grads,
// where the next micro-batch overwrites it, and the sum holds only good
// micro-batches. So a bad micro-batch cannot poison the update.
//
// The sums are an axpy, which every backend has as a GEMM: the grads
// vector as an n×1 matrix times a 1×1 matrix holding 1.0. That needs no
// kernel in the generated module and runs on the device's GEMM threads.
type accumulator struct {
	k       int  // micro-batches per update in Run("step"); at least 1
	pend    int  // good micro-batches whose gradients are held
	rows    int  // rows of those micro-batches (dropout's row0)
	inGrads bool // grads holds the latest good micro-batch, not yet in sum
	inSum   bool // sum holds the total of earlier micro-batches
	// foundInf: under loss scaling, a pending micro-batch's gradients
	// were not finite, so the update is skipped (loss_scale.go).
	foundInf bool
	sum      Ptr // grads-sized; 0 until first needed
	one      Ptr // the scalar 1.0 in the parameter dtype
}

// AccumulationSteps is the number of micro-batches Run("step") sums
// before each update (1: every call updates).
func (s *Session) AccumulationSteps() int { return s.acc.k }

// SetAccumulationSteps changes how many micro-batches Run("step") sums
// before each update (k of 0 or 1: every call updates; negative k is an
// error). It allocates the sum
// now, so that running out of memory shows here; pending micro-batches
// stay pending.
func (s *Session) SetAccumulationSteps(k int) error {
	if err := s.alive("SetAccumulationSteps"); err != nil {
		return err
	}
	if k < 0 {
		return fmt.Errorf("%s: SetAccumulationSteps(%d): must not be negative", s.plan.Model, k)
	}
	if k > 1 {
		if err := s.allocSum(); err != nil {
			return err
		}
	}
	s.acc.k = max(k, 1)
	return nil
}

// Pending is the number of micro-batches whose gradients wait for
// RunUpdate.
func (s *Session) Pending() int { return s.acc.pend }

// RunGrads runs the gradient phase of the training step (forward and
// backward) on a batch of the given size, with the inputs written before,
// checks it, and adds its gradient to the pending ones. The loss output
// holds this batch's loss. On error nothing is added.
func (s *Session) RunGrads(batch int) error {
	if err := s.alive("RunGrads"); err != nil {
		return err
	}
	fi, f, err := s.fn("step")
	if err != nil {
		return err
	}
	if err := s.setBatch("step", batch); err != nil {
		return err
	}
	if err := s.syncClock(); err != nil {
		return err
	}
	if err := s.takeInputs(); err != nil {
		return err
	}
	err = s.microBatch(fi, f)
	if e := s.fenceInputs(); err == nil {
		err = e
	}
	if err != nil {
		return err // the dropout counter too is as before
	}
	s.calls++
	return nil
}

// RunUpdate runs the optimizer update with the mean gradient of the
// micro-batches since the last update, then starts a new accumulation.
func (s *Session) RunUpdate() error {
	if err := s.alive("RunUpdate"); err != nil {
		return err
	}
	fi, f, err := s.fn("step")
	if err != nil {
		return err
	}
	return s.checkedUpdate(fi, f)
}

// trainStep is Run("step"): with k = 1, the gradient phase, the update
// phase and one check at the end, so a plain step reads the device once;
// with k > 1, a checked micro-batch, and the update on every k-th good one.
func (s *Session) trainStep(fi int, f *Func) error {
	if s.acc.k > 1 {
		if err := s.microBatch(fi, f); err != nil {
			return err
		}
		if s.acc.pend < s.acc.k {
			return nil
		}
		return s.checkedUpdate(fi, f)
	}
	// One step, forward to update, is one graph on a Grapher device.
	if err := s.graphed(f, func() error {
		if err := s.gradPhase(fi, f); err != nil {
			return err
		}
		return s.updatePhase(fi, f)
	}); err != nil {
		s.markClock() // the clock kernel may not have run
		return err
	}
	if err := s.check("step", s.t); err != nil {
		// The device skipped the update (compiler/guard.go) and left the
		// clock alone; the host's counts follow, and it rewrites the
		// clock from them.
		s.t--
		s.schedT--
		s.markClock()
		if err == errSkip || s.sumOverflowed(err) {
			return s.skipStep()
		}
		return err
	}
	// The clock kernel advanced the device's counters, scaler and bound
	// after the good step, as the host advances its own.
	s.finiteStep()
	return nil
}

func (s *Session) microBatch(fi int, f *Func) error {
	if err := s.gradPhase(fi, f); err != nil {
		return err
	}
	if err := s.check("step", s.t+1); err != nil {
		if err == errSkip {
			// GradScaler checks the accumulated gradients at
			// scaler.step: the micro-batch counts, and the update skips.
			s.acc.foundInf = true
			return nil
		}
		s.acc.inGrads = false
		s.acc.pend--
		s.acc.rows -= s.env["B"]
		return err
	}
	return nil
}

// gradPhase moves a pending gradient out of grads and runs the forward
// and backward steps.
func (s *Session) gradPhase(fi int, f *Func) error {
	if f.UpdateFrom <= 0 || f.UpdateFrom > len(f.Steps) {
		return fmt.Errorf("%s.%s: the plan marks no update phase (UpdateFrom %d); regenerate the package", s.plan.Model, f.Name, f.UpdateFrom)
	}
	if s.acc.inGrads {
		if err := s.stash(); err != nil {
			return err
		}
	}
	s.row0 = s.sampleOffset(s.env["B"])
	if err := s.clearScratch(); err != nil {
		return err
	}
	if err := s.runSteps(fi, f, 0, f.UpdateFrom, nil); err != nil {
		return err
	}
	s.acc.inGrads = true
	s.acc.pend++
	s.acc.rows += s.env["B"]
	return nil
}

// sampleOffset is the global index of the first row of a batch of the
// given size about to run: the rows of the update's earlier micro-batches
// come first, so that k micro-batches of b rows number their rows as one
// batch of k·b does, and dropout draws the same masks.
func (s *Session) sampleOffset(batch int) int64 {
	if s.dp.comm != nil {
		return s.sampleOffsetDP(batch)
	}
	return int64(s.acc.rows)
}

func (s *Session) updatePhase(fi int, f *Func) error {
	a := &s.acc
	if a.pend == 0 {
		return fmt.Errorf("%s: update with no gradients: run RunGrads (a micro-batch) first", s.plan.Model)
	}
	if a.inSum {
		g, n, err := s.gradsVec()
		if err != nil {
			return err
		}
		scale := 1 / float64(a.pend)
		if !a.inGrads {
			// The last micro-batch failed: grads holds no gradient.
			if err := s.dev.Memset(s.ptrs[g], 0, n*int64(s.plan.DType.Size())); err != nil {
				return err
			}
		}
		if err := s.axpy(s.ptrs[g], a.sum, n, scale, scale); err != nil {
			return err
		}
	}
	if s.dp.comm != nil {
		if err := s.reduceGrads(); err != nil {
			return err
		}
	}
	s.t++
	s.schedT++
	if s.scal == nil {
		s.scal = map[string]float64{}
	}
	// The update's scalars are in the device clock (clock.go), prepared
	// by the last step's clock kernel or syncClock; the host passes only
	// the max norm, which changes only with SetClipNorm.
	scal := s.scal
	if s.plan.Optimizer.GradNorm() {
		scal["max_norm"] = s.clip
	}
	if err := s.runSteps(fi, f, f.UpdateFrom, len(f.Steps), scal); err != nil {
		s.t--
		s.schedT--
		return err
	}
	a.pend, a.rows, a.inGrads, a.inSum = 0, 0, false, false
	return nil
}

// checkedUpdate is the update phase of accumulated micro-batches, then,
// when the plan checks its update (runtime.UpdateCheckKernel), one read of
// the status block: an update that would make a parameter or optimizer
// state non-finite changed nothing on the device, and the host's step
// count follows. Its micro-batches are dropped either way: their mean
// has replaced the last one's gradient.
func (s *Session) checkedUpdate(fi int, f *Func) error {
	if err := s.syncClockForUpdate(); err != nil {
		return err
	}
	if a := &s.acc; a.foundInf {
		if a.pend == 0 {
			return fmt.Errorf("%s: update with no gradients: run RunGrads (a micro-batch) first", s.plan.Model)
		}
		if s.dp.comm == nil {
			a.pend, a.rows, a.inGrads, a.inSum, a.foundInf = 0, 0, false, false, false
			return s.skipStep()
		}
		// The other ranks update unless told: the verdict goes through
		// the status block to the group's (dataparallel.go), and the
		// update phase commits nothing.
		a.foundInf = false
		if err := s.markStatus(1); err != nil {
			return err
		}
	}
	if err := s.updatePhase(fi, f); err != nil {
		s.markClock()
		return err
	}
	// A group's verdict (dataparallel.go) is read back even where the
	// plan has no update check.
	if !hasBuiltin(f, UpdateCheckKernel) && s.dp.comm == nil {
		s.finiteStep()
		return nil
	}
	if err := s.check("step", s.t); err != nil {
		s.t--
		s.schedT--
		s.markClock()
		if err == errSkip || s.sumOverflowed(err) {
			return s.skipStep() // the group agreed to skip (dataparallel.go)
		}
		return err
	}
	s.finiteStep()
	return nil
}

// hasBuiltin reports whether f launches the builtin kernel name.
func hasBuiltin(f *Func, name string) bool {
	for i := range f.Steps {
		if f.Steps[i].Builtin == name {
			return true
		}
	}
	return false
}

// stash adds the gradient in grads into the sum.
func (s *Session) stash() error {
	g, n, err := s.gradsVec()
	if err != nil {
		return err
	}
	if err := s.allocSum(); err != nil {
		return err
	}
	bytes := n * int64(s.plan.DType.Size())
	if !s.acc.inSum {
		err = s.dev.CopyDevice(s.acc.sum, s.ptrs[g], bytes)
	} else {
		err = s.axpy(s.acc.sum, s.ptrs[g], n, 1, 1)
	}
	if err != nil {
		return fmt.Errorf("%s: accumulating gradients: %w", s.plan.Model, err)
	}
	s.acc.inSum, s.acc.inGrads = true, false
	return nil
}

// gradsVec is the flat gradient vector's buffer and element count.
func (s *Session) gradsVec() (int, int64, error) {
	g, err := s.Lookup("grads", "grads")
	if err != nil {
		return 0, 0, err
	}
	return g, s.plan.Buffers[g].Elems.Eval(s.maxEnv), nil
}

// allocSum allocates the sum and the 1.0 the axpy multiplies by, once.
func (s *Session) allocSum() error {
	if s.acc.sum != 0 {
		return nil
	}
	_, n, err := s.gradsVec()
	if err != nil {
		return err
	}
	es := int64(s.plan.DType.Size())
	sum, err := s.dev.Alloc(alignUp(n*es) + Align)
	if err != nil {
		return fmt.Errorf("%s: allocating the %d-byte gradient sum: %w", s.plan.Model, n*es, err)
	}
	s.base = append(s.base, sum)
	one := sum + Ptr(alignUp(n*es))
	switch s.plan.DType {
	case F64:
		v := 1.0
		err = s.dev.CopyToDevice(one, unsafe.Pointer(&v), 8)
	default:
		v := float32(1)
		err = s.dev.CopyToDevice(one, unsafe.Pointer(&v), 4)
	}
	if err != nil {
		return err
	}
	s.acc.sum, s.acc.one = sum, one
	return nil
}

// axpy computes dst = alpha*src + beta*dst over n elements as the GEMM
// (n×1)·(1×1).
func (s *Session) axpy(dst, src Ptr, n int64, alpha, beta float64) error {
	return s.dev.Gemm(GemmArgs{DType: s.plan.DType, M: int(n), N: 1, K: 1, Alpha: alpha, Beta: beta,
		A: src, LDA: 1, B: s.acc.one, LDB: 1, C: dst, LDC: 1, Batch: 1})
}
