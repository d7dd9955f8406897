package runtime

import (
	"fmt"
	"math"
	"unsafe"
)

// StatusWords is the size, in int32 words, of a plan's status block, the
// one piece of device memory the host reads after a training step:
//
//	[0]    the code of the checked op that failed (0: none)
//	[1..3] that op's details (the bad value, its row, the bound)
//	[4]    1 when the loss is not finite
//	[5]    1 when a gradient is not finite, 2 when the update would make
//	       a parameter or optimizer state non-finite (the update check),
//	       3 when the clipping norm is not finite, 4 and 5 when another
//	       rank of a data-parallel group failed or had a non-finite loss
//	       or gradient (dataparallel.go: the host writes these)
//	[6..7] the loss, as a float64
//	[8]    the largest |gradient|, as float32 bits rounded up (the guard)
//	[9]    the largest |new parameter|, [10] and [11] the largest |new
//	       value| of the optimizer's first and second state vectors, as
//	       float32 bits rounded up, and [12] 1: written by the update
//	       check when it checked every element (update_bound.go)
//	[13..15] unused
//
// Codes are raised by the checked kernels, words 4..8 by the guard kernel
// and word 5 also by the update check (compiler/guard.go); kernels that
// commit state skip when 0, 4 or 5 is set, so a failed step changes
// nothing. Words 8..15 are the step's scratch: the session zeroes them
// before each gradient phase. Plans from before the update check have 8
// words.
const StatusWords = 16

// Status words the update check and its bound use (update_bound.go).
const (
	// StatusClipCoef is the status word of ClipGradNorm's coefficient
	// (GradNormKernel).
	StatusClipCoef = 14
	// StatusNormTicket counts the grad-norm kernel's finished blocks.
	StatusNormTicket = 13
	statusMaxGrad    = 8
	statusMaxNew     = 9 // 9, 10, 11: parameters, first and second state
	statusFullPass   = 12
)

// Builtin kernels: launch steps whose kernel codegen adds to every module
// with a guarded step rather than rendering it from a group.
const (
	GuardKernel  = "guard"  // Buf: status block, Src: the loss
	CommitKernel = "commit" // each of Commits: Dst ← Src, unless the status block says the step failed
	// UpdateCheckKernel (Buf: status block), the update phase's first
	// launch, computes the optimizer's update without storing it and
	// fails the step when a new value would not be finite.
	UpdateCheckKernel = "update_check"
	// GradNormKernel (Buf: status block), with Optimizer.ClipNorm, runs
	// just before the update check: the global norm of the update's
	// gradient (after accumulation and the all-reduce), and from it
	// clip_grad_norm_'s coefficient, which it stores in status word
	// StatusClipCoef (words 14 and 15 for f64); the update reads it
	// there. A norm that is not finite fails the step (word 5 =
	// clipNormFailed). Its step is WhileClipping: with the max norm at
	// +Inf it does not run, and the update reads 1 instead.
	GradNormKernel = "grad_norm"
	// GradNormMaxBlocks bounds the grad-norm kernel's grid: the size of
	// its partial sums (the step's Src, f64).
	GradNormMaxBlocks = 1024
)

// updateFailed is status word 5's value when the update check failed.
const updateFailed = 2

// clipNormFailed is status word 5's value when the gradients' global
// norm was not finite (GradNormKernel).
const clipNormFailed = 3

// Status word 5's values that the host writes after a data-parallel
// group agreed on a step's verdict (dataparallel.go): another rank's
// step failed (a label out of range), or another rank's loss or
// gradients were not finite.
const (
	peerFailed    = 4
	peerNonFinite = 5
)

// check runs the plan's checks for function fn after it ran, from one read
// of the status block (plans from before the guard also read the loss).
// step is the 1-based optimizer step the call belongs to, which its
// errors name: s.t+1 before the update phase has counted it, s.t after.
func (s *Session) check(fn string, step int) error {
	// A block of its own, not s.status: cgo refuses a pointer into the
	// Session, which holds Go pointers. Made once (a step allocates as
	// little as it can).
	if s.statusRead == nil {
		s.statusRead = new([StatusWords]int32)
	}
	blk := s.statusRead
	clear(blk[:])
	defer func() { s.status = *blk }()
	read := false
	for _, c := range s.plan.Checks {
		if c.Func != fn {
			continue
		}
		switch c.Kind {
		case "status", "guard":
			if !read {
				if err := s.dev.CopyToHost(unsafe.Pointer(&blk[0]), s.ptrs[c.Buf], s.statusBytes(c.Buf)); err != nil {
					return err
				}
				read = true
			}
		}
	}
	return s.verdict(fn, blk, read, step, s.schedT)
}

// statusBytes is how much of status block buf the host reads.
func (s *Session) statusBytes(buf int) int64 {
	return min(s.plan.Buffers[buf].Elems.Mul, StatusWords) * 4
}

// verdict is check's judgement of function fn's status block blk (read:
// whether it was read), for the given step and schedule step; a
// pipelined step's (pipeline.go) comes a call late.
func (s *Session) verdict(fn string, blk *[StatusWords]int32, read bool, step, schedT int) error {
	if read {
		for _, c := range s.plan.Checks {
			if c.Func == fn && c.Kind == "guard" {
				s.loss = math.Float64frombits(uint64(uint32(blk[6])) | uint64(uint32(blk[7]))<<32)
			}
		}
	}
	for _, c := range s.plan.Checks {
		if c.Func != fn {
			continue
		}
		switch c.Kind {
		case "status":
			// Each checked op raises its own code (0: a plan from before
			// codes, where cross-entropy raised 1).
			if blk[0] != 0 && (int(blk[0]) == c.Code || c.Code == 0) {
				if err := s.clearStatus(c.Buf); err != nil {
					return err
				}
				what, where := "label", "row"
				if c.Detail != "" {
					what, where = c.Detail, "position"
				}
				return fmt.Errorf("%s (%s): %s: %s %d at %s %d is out of range [0,%d)", c.Op, c.Pos, s.plan.Model, what, blk[1], where, blk[2], blk[3])
			}
		case "guard":
			if blk[4] != 0 || blk[5] != 0 {
				if err := s.clearStatus(c.Buf); err != nil {
					return err
				}
				// Under loss scaling a non-finite loss or gradient is
				// routine (loss_scale.go): a non-finite loss gives
				// non-finite gradients, and PyTorch's scaler.step skips
				// on those. The clock kernel (codegen/clock.go) backs the
				// scale off on the same condition.
				if s.scaler.on && blk[0] == 0 && blk[5] != peerFailed && (blk[4] != 0 || blk[5] == 1 || blk[5] == peerNonFinite) {
					return errSkip
				}
				if blk[4] != 0 {
					return &LossError{Model: s.plan.Model, Op: c.Op, Pos: c.Pos, What: c.Detail, Loss: s.loss, Step: step}
				}
				if blk[5] == clipNormFailed {
					return fmt.Errorf("%s (%s): %s: the gradients' global norm (ClipGradNorm) is not finite at step %d; the step changed nothing", c.Op, c.Pos, s.plan.Model, step)
				}
				if blk[5] == peerFailed {
					return fmt.Errorf("%s: another rank of the data-parallel group failed step %d (see its error); the step changed nothing on this rank", s.plan.Model, step)
				}
				if blk[5] == peerNonFinite {
					return fmt.Errorf("%s (%s): %s: another rank's loss or gradients were not finite at step %d; the step changed nothing", c.Op, c.Pos, s.plan.Model, step)
				}
				if blk[5] == updateFailed {
					return &UpdateError{Model: s.plan.Model, Optimizer: s.plan.Optimizer.Kind, Step: step, LR: s.rate(schedT)}
				}
				return fmt.Errorf("%s (%s): %s: a gradient of %s (%v) is not finite at step %d; the step changed nothing", c.Op, c.Pos, s.plan.Model, c.Detail, s.loss, step)
			}
		case "finite":
			v, err := s.ReadFloats(c.Buf)
			if err != nil {
				return err
			}
			for _, x := range v {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return fmt.Errorf("%s (%s): %s: %s is %v at step %d", c.Op, c.Pos, s.plan.Model, c.Detail, x, step)
				}
			}
		}
	}
	return nil
}

// clearStatus zeroes the status block's verdict words (0..7) so that the
// session stays usable after a failed call. The scratch words from 8 on
// are the gradient phase's: a failed Predict between RunGrads and
// RunUpdate must not erase the guard's largest |gradient|.
func (s *Session) clearStatus(buf int) error {
	return s.dev.Memset(s.ptrs[buf], 0, min(s.plan.Buffers[buf].Elems.Mul, statusMaxGrad)*4)
}

// StepLoss is the loss of the last training step or micro-batch: from
// the status block the step's check already read, so no further read of
// the device (plans without a guard read the loss output).
func (s *Session) StepLoss() (float64, error) {
	if s.guarded("step") {
		return s.loss, nil
	}
	_, f, err := s.fn("step")
	if err != nil {
		return 0, err
	}
	for _, o := range f.Outputs {
		if o.Name == "loss" {
			v, err := s.ReadFloats(o.Buf)
			if err != nil || len(v) != 1 {
				return 0, fmt.Errorf("%s: reading the loss: %v", s.plan.Model, err)
			}
			return v[0], nil
		}
	}
	return 0, fmt.Errorf("%s: step has no loss output", s.plan.Model)
}

// guarded reports whether function fn's commits are guarded on the device.
func (s *Session) guarded(fn string) bool {
	for _, c := range s.plan.Checks {
		if c.Func == fn && c.Kind == "guard" {
			return true
		}
	}
	return false
}

// LossError is a step whose loss is NaN or ±Inf (the guard's check): the
// step changed nothing. A training run that diverges ends with one.
// Under a loss scaler such a step is skipped instead (loss_scale.go).
type LossError struct {
	Model, Op, Pos string
	What           string  // the loss's name
	Loss           float64 // its value
	Step           int     // the step (1-based)
}

func (e *LossError) Error() string {
	return fmt.Sprintf("%s (%s): %s: %s is %v at step %d; the step changed nothing", e.Op, e.Pos, e.Model, e.What, e.Loss, e.Step)
}

// UpdateError is a step whose gradients were finite but whose optimizer
// update would have made a parameter or the optimizer's state non-finite
// (or within a factor 2 of overflow): a learning rate or gradient too
// large for the parameters' type. The step changed nothing; with
// gradient accumulation its micro-batches are dropped.
type UpdateError struct {
	Model, Optimizer string
	Step             int     // the step that failed (1-based)
	LR               float64 // the learning rate it ran with
}

func (e *UpdateError) Error() string {
	return fmt.Sprintf("%s: the %s update of step %d (learning rate %g) would make a parameter or the optimizer's state non-finite; the step changed nothing", e.Model, e.Optimizer, e.Step, e.LR)
}
