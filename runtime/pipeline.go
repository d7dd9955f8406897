package runtime

import (
	"errors"
	"fmt"
	"unsafe"
)

// Pipelined steps (issue 26 item 1): a training step whose status block
// (the guard's verdict and the loss) is read back one step late, so the
// host launches step n+1 while the device still runs step n instead of
// waiting for step n to finish after every launch.
//
// Each pipelined Run("step") queues, in stream order:
//
//	the status block's verdict words cleared (what a failed step left)
//	the step's calls (one graph on a Grapher device)
//	a copy of the status block into a slot of a two-slot host ring
//
// and only then waits for the previous step's slot, whose copy was queued
// behind the previous step, and judges it (Session.verdict). On an
// AsyncReader device (the GPU) the ring is page-locked host memory and
// the copy an asynchronous DMA, so the wait ends when step n-1 is done
// while step n is queued behind it: the device never idles waiting for
// the host. Elsewhere (the CPU backend, where every call has finished
// when it returns) the copy is a plain read, and only the semantics are
// the same.
//
// What a step's verdict does arrives a call late:
//   - Its error (a NaN loss, a label out of range, an update that would
//     overflow) is returned by the next call into the session: the next
//     Run("step") (whose own step has then been queued and runs), Flush,
//     or any method that reads or changes the session's state (Save,
//     Load, SetLR, ReadFloats, Run of another function, ...), which
//     flush first and return the error instead of doing their work;
//     Close does its work and returns it too. The error names the step
//     that caused it. The failed step changed nothing on the device, as
//     a synchronous one.
//   - After Run("step"), StepLoss, StepSkipped and UpdateCheckFull
//     describe the step before (the last judged), and LossScale and
//     Scaler the scaler after it: the scale the step in flight runs
//     with. Steps, ScheduleSteps and LR count the step in flight as
//     taken (a failure in its verdict takes it back, as a synchronous
//     step's does). TakeLosses returns every step's loss exactly once,
//     in order; the generated Step returns StepLoss, the step before's.
//   - A skipped step under loss scaling is skipped on the device: the
//     clock kernel backs the scale off itself (codegen/clock.go), so the
//     next step runs at the backed-off scale, as GradScaler's would.
//
// Pipelining applies to plain training steps of a guarded plan; gradient
// accumulation, a data-parallel group and profiling run synchronously
// (a step of theirs flushes first), and TakeLosses still returns their
// losses, so a loop written for pipelined steps works with them too.

// AsyncReader is a device that copies device memory into its page-locked
// host memory (HostAllocator) without waiting: CopyToHostAsync queues the
// copy behind the work already on the stream and returns at once, and
// WaitHost on the destination returns once it holds the bytes.
type AsyncReader interface {
	HostAllocator
	CopyToHostAsync(dst unsafe.Pointer, src Ptr, bytes int64) error
}

// pipeline is a session's state of pipelined steps.
type pipeline struct {
	on      bool
	status  int                    // the step's status block buffer
	slots   [2]*[StatusWords]int32 // the ring
	pinned  bool                   // the slots are AllocHost memory
	next    int                    // the slot the next step's status goes to
	pending int                    // the slot whose step is not judged yet, -1: none
	losses  []float64              // losses judged since TakeLosses
	in      inputSets              // double-buffered inputs (pipeline_inputs.go)
}

// SetPipelined turns pipelined steps on or off (see above). Turning it
// off flushes the step in flight and returns its error. A plan whose
// step has no guard (plans from before it) cannot be pipelined.
func (s *Session) SetPipelined(on bool) error {
	if err := s.alive("SetPipelined"); err != nil {
		return err
	}
	if !on {
		err := s.Flush()
		s.pipe.on = false
		return errors.Join(err, s.closeInputSets())
	}
	if s.pipe.on {
		return nil
	}
	st := -1
	for _, c := range s.plan.Checks {
		if c.Func != "step" {
			continue
		}
		switch c.Kind {
		case "guard":
			st = c.Buf
		case "finite":
			return fmt.Errorf("%s: SetPipelined: the plan checks a buffer of its step on the host (a plan from before the guard); regenerate the package", s.plan.Model)
		}
	}
	if st < 0 {
		return fmt.Errorf("%s: SetPipelined: the plan's step has no guard (a plan from before it, or no training step); regenerate the package", s.plan.Model)
	}
	if s.pipe.slots[0] == nil {
		if a, ok := s.dev.(AsyncReader); ok {
			for i := range s.pipe.slots {
				p, err := a.AllocHost(StatusWords * 4)
				if err != nil {
					s.freeRing()
					return fmt.Errorf("%s: SetPipelined: %w", s.plan.Model, err)
				}
				s.pipe.slots[i] = (*[StatusWords]int32)(p)
			}
			s.pipe.pinned = true
		} else {
			for i := range s.pipe.slots {
				s.pipe.slots[i] = new([StatusWords]int32)
			}
		}
	}
	if err := s.openInputSets(); err != nil {
		s.freeRing()
		return err
	}
	s.pipe.on, s.pipe.status, s.pipe.pending = true, st, -1
	return nil
}

// Pipelined reports whether pipelined steps are on.
func (s *Session) Pipelined() bool { return s != nil && s.pipe.on }

// Flush waits for the pipelined step in flight, if any, and returns its
// verdict: nil, or the error the step's Run would have returned had it
// been synchronous. Afterwards the session's state is the device's.
func (s *Session) Flush() error {
	if s == nil || s.closed || !s.pipe.on || s.pipe.pending < 0 {
		return nil
	}
	return s.judge(0)
}

// TakeLosses appends to dst the losses of the training calls judged since
// the last call (each step's or micro-batch's once, in order; a skipped
// step's too, a failed one has none) and returns it. The session keeps
// at most MaxHeldLosses of them (a caller that never takes them leaks
// nothing): a loop that wants every one takes them at least that often.
// Without SetPipelined it collects nothing: Run("step") judges its own
// step, and StepLoss returns its loss.
func (s *Session) TakeLosses(dst []float64) []float64 {
	if s == nil {
		return dst
	}
	dst = append(dst, s.pipe.losses...)
	s.pipe.losses = s.pipe.losses[:0]
	return dst
}

// MaxHeldLosses bounds the losses a session holds for TakeLosses; past
// it the older half is dropped.
const MaxHeldLosses = 4096

// held records a judged call's loss for TakeLosses.
func (s *Session) held(loss float64) {
	if l := s.pipe.losses; len(l) >= MaxHeldLosses {
		s.pipe.losses = append(l[:0], l[len(l)/2:]...)
	}
	s.pipe.losses = append(s.pipe.losses, loss)
}

// pipelinable reports whether this Run("step") may be pipelined.
func (s *Session) pipelinable() bool {
	return s.pipe.on && s.acc.k == 1 && s.acc.pend == 0 && s.dp.comm == nil && s.prof == nil
}

// flushFor flushes before a session method that reads or changes the
// session's state (alive's callers but WriteInput, Lookup and Close).
func (s *Session) flushFor(method string) error {
	switch method {
	case "WriteInput", "Lookup", "Close", "SetPipelined", "step": // Run("step") flushes unless pipelined
		return nil
	}
	return s.Flush()
}

// pipelinedStep queues step n (Run("step") with the clock synced), then
// judges step n-1.
func (s *Session) pipelinedStep(fi int, f *Func) error {
	st := s.pipe.status
	err := s.graphed(f, func() error {
		// The verdict words a failed step left (judge clears them too,
		// but behind the steps already queued).
		if err := s.dev.Memset(s.ptrs[st], 0, min(s.plan.Buffers[st].Elems.Mul, statusMaxGrad)*4); err != nil {
			return err
		}
		if err := s.gradPhase(fi, f); err != nil {
			return err
		}
		return s.updatePhase(fi, f)
	})
	if err != nil {
		// The host's side of the step failed: judge the step before, so
		// that the host's mirrors are the device's, and rewrite the clock
		// from them (the clock kernel may not have run).
		ferr := s.Flush()
		s.markClock()
		return errors.Join(err, ferr)
	}
	s.calls++
	slot := s.pipe.next
	s.pipe.next ^= 1
	if err := s.readStatus(slot); err != nil {
		// The step before is judged as usual; this step's verdict is
		// lost, so wait for the device and rewrite its clock from the
		// host's counts.
		var perr error
		if prev := s.pipe.pending; prev >= 0 {
			s.pipe.pending = -1
			perr = s.judgeSlot(prev, 1)
		}
		return errors.Join(err, perr, s.resync())
	}
	prev := s.pipe.pending
	s.pipe.pending = slot
	if prev < 0 {
		return nil
	}
	return s.judgeSlot(prev, 1)
}

// readStatus queues the copy of the status block into ring slot i.
func (s *Session) readStatus(i int) error {
	st := s.pipe.status
	n := s.statusBytes(st)
	if s.pipe.pinned {
		return s.dev.(AsyncReader).CopyToHostAsync(unsafe.Pointer(&s.pipe.slots[i][0]), s.ptrs[st], n)
	}
	return s.dev.CopyToHost(unsafe.Pointer(&s.pipe.slots[i][0]), s.ptrs[st], n)
}

// judge judges the pending step; later steps have been queued after it.
func (s *Session) judge(later int) error {
	i := s.pipe.pending
	s.pipe.pending = -1
	return s.judgeSlot(i, later)
}

// judgeSlot waits for ring slot i and judges its step as trainStep
// judges a synchronous one; later is how many steps the host has
// counted since (their updates are in s.t and s.schedT already).
func (s *Session) judgeSlot(i, later int) error {
	blk := s.pipe.slots[i]
	if s.pipe.pinned {
		if err := s.dev.(AsyncReader).WaitHost(unsafe.Pointer(&blk[0])); err != nil {
			return err
		}
	}
	// The words past the copied block are the last judged step's zeros.
	err := s.verdict("step", blk, true, s.t-later, s.schedT-later)
	s.status = *blk
	if err == nil {
		s.held(s.loss)
		s.finiteStep()
		return nil
	}
	// The device skipped the update and left its counters alone, as the
	// host's follow; it already backed the scaler off on a skip (the
	// clock kernel), so the host's clock mirror follows without
	// rewriting the device's, which holds the steps queued since.
	s.t--
	s.schedT--
	if err == errSkip {
		s.held(s.loss)
		dirty := s.clock.dirty
		err = s.skipStep()
		s.clock.dirty = dirty
		return err
	}
	s.calls--
	return err
}

// resync waits for the device and makes the host's mirrors its state
// after a pipelined step whose verdict could not be read: the clock is
// rewritten from the host's counts before the next launch.
func (s *Session) resync() error {
	s.markClock()
	return s.dev.Sync()
}

// freeRing frees the ring's page-locked slots.
func (s *Session) freeRing() error {
	var errs []error
	if s.pipe.pinned {
		for i, p := range s.pipe.slots {
			if p != nil {
				errs = append(errs, s.dev.(AsyncReader).FreeHost(unsafe.Pointer(&p[0])))
			}
			s.pipe.slots[i] = nil
		}
	}
	s.pipe.slots, s.pipe.pinned, s.pipe.on, s.pipe.pending = [2]*[StatusWords]int32{}, false, false, -1
	errs = append(errs, s.closeInputSets())
	return errors.Join(errs...)
}
