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
//	[5]    1 when a gradient is not finite
//	[6..7] the loss, as a float64
//
// Codes are raised by the checked kernels, words 4..7 by the guard kernel
// (compiler/guard.go); kernels that commit state skip when 0, 4 or 5 is
// set, so a failed step changes nothing.
const StatusWords = 8

// Builtin kernels: launch steps whose kernel codegen adds to every module
// with a guarded step rather than rendering it from a group.
const (
	GuardKernel  = "guard"  // Buf: status block, Src: the loss
	CommitKernel = "commit" // Buf ← Src unless the status block says the step failed
)

// check runs the plan's checks for function fn after it ran, from one read
// of the status block (plans from before the guard also read the loss).
func (s *Session) check(fn string) error {
	var blk [StatusWords]int32
	read := false
	for _, c := range s.plan.Checks {
		if c.Func != fn {
			continue
		}
		switch c.Kind {
		case "status", "guard":
			if !read {
				n := min(s.plan.Buffers[c.Buf].Elems.Mul, StatusWords)
				if err := s.dev.CopyToHost(unsafe.Pointer(&blk[0]), s.ptrs[c.Buf], n*4); err != nil {
					return err
				}
				read = true
			}
		}
	}
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
				if blk[4] != 0 {
					return fmt.Errorf("%s (%s): %s: %s is %v at step %d; the step changed nothing", c.Op, c.Pos, s.plan.Model, c.Detail, s.loss, s.t+1)
				}
				return fmt.Errorf("%s (%s): %s: a gradient of %s (%v) is not finite at step %d; the step changed nothing", c.Op, c.Pos, s.plan.Model, c.Detail, s.loss, s.t+1)
			}
		case "finite":
			v, err := s.ReadFloats(c.Buf)
			if err != nil {
				return err
			}
			for _, x := range v {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return fmt.Errorf("%s (%s): %s: %s is %v at step %d", c.Op, c.Pos, s.plan.Model, c.Detail, x, s.t)
				}
			}
		}
	}
	return nil
}

// clearStatus zeroes the status block so that the session stays usable
// after a failed call.
func (s *Session) clearStatus(buf int) error {
	return s.dev.Memset(s.ptrs[buf], 0, s.plan.Buffers[buf].Elems.Mul*4)
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
