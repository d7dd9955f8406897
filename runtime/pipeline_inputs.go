package runtime

import (
	"errors"
	"fmt"
	"unsafe"
)

// The inputs of pipelined steps (pipeline.go), on a device with a copy
// stream (CopyStreamer): the next step's inputs are copied on the copy
// stream while the step in flight runs, into a second set of input
// buffers, so the DMA overlaps the kernels instead of following them on
// the one stream. Steps alternate between the two sets:
//
//   - WriteInput copies into the set the step in flight does not read,
//     on the copy stream, once the launch that last read that set (two
//     steps back) has passed (a Fence recorded behind it);
//   - the next Run (any function) makes the main stream wait for those
//     copies (JoinCopies), carries over any input of the set it was not
//     given (a device copy from the other set, behind which a fence
//     moves the other set's, since the copy reads it), points the
//     session's buffers (and every view aliasing them) at the set, and
//     records a fence behind its launches.
//
// A pipelined step waits for the step before it, so a write two steps
// on finds its fence passed; the fences keep the other orders right
// (inference runs back to back, a carry-over copy still queued).
//
// The graph key names the set, since a graph holds the addresses (two
// graphs a function).

// Fence names a point on a CopyStreamer's main stream.
type Fence int64

// CopyStreamer is a device with a second stream for copies to the device.
type CopyStreamer interface {
	// Fence marks the main stream behind the work queued so far.
	Fence() (Fence, error)
	// CopyToDeviceAfter queues the copy of bytes bytes from host memory
	// src to dst on the copy stream, to start once fence f has passed
	// (0: at once). It returns once src may be reused, or for AllocHost
	// memory once the copy is queued (WaitHost then waits for it).
	CopyToDeviceAfter(f Fence, dst Ptr, src unsafe.Pointer, bytes int64) error
	// JoinCopies makes the work queued on the main stream from now on
	// wait for the copies queued so far.
	JoinCopies() error
}

// inputSets is the session's second set of input buffers.
type inputSets struct {
	on      bool
	inputs  []int    // the plan's input buffers
	own     [2][]Ptr // their pointers in each set, by position in inputs
	base    Ptr      // the allocation behind set 1
	views   []int    // every buffer that is an input or a view of one
	ptr     [2][]Ptr // their pointers in each set, by position in views
	arg     [2][]Arg // the same, boxed
	cur     int      // the set the buffers point at: the last launch's
	written []bool   // inputs written into the other set since then
	any     bool     // some input was
	fence   [2]Fence // behind the last launch that read each set
}

// openInputSets allocates the second set when the device has a copy
// stream; SetPipelined calls it.
func (s *Session) openInputSets() error {
	in := &s.pipe.in
	if in.on {
		return nil
	}
	if _, ok := s.dev.(CopyStreamer); !ok {
		return nil
	}
	var inputs []int
	for i := range s.plan.Buffers {
		if s.plan.Buffers[i].Role == "input" {
			inputs = append(inputs, i)
		}
	}
	if len(inputs) == 0 {
		return nil
	}
	var total int64
	offs := make([]int64, len(inputs))
	for k, i := range inputs {
		offs[k] = total
		total += (s.bytes(&s.plan.Buffers[i], s.maxEnv) + 255) &^ 255
	}
	base, err := s.dev.Alloc(total)
	if err != nil {
		return fmt.Errorf("%s: SetPipelined: the second set of inputs (%d bytes): %w", s.plan.Model, total, err)
	}
	*in = inputSets{inputs: inputs, base: base, written: make([]bool, len(inputs))}
	for k, i := range inputs {
		in.own[0] = append(in.own[0], s.ptrs[i])
		in.own[1] = append(in.own[1], base+Ptr(offs[k]))
	}
	// Every buffer whose alias chain ends at an input moves with it.
	for i := range s.plan.Buffers {
		root, off := i, Ptr(0)
		for d := 0; d <= len(s.plan.Buffers); d++ {
			b := &s.plan.Buffers[root]
			if b.Placement == Persistent || b.Placement == Arena || b.AliasOf < 0 {
				break
			}
			off += Ptr(b.Offset * int64(b.DType.Size()))
			root = b.AliasOf
		}
		for k, r := range inputs {
			if r == root {
				in.views = append(in.views, i)
				in.ptr[0] = append(in.ptr[0], s.ptrs[i])
				in.ptr[1] = append(in.ptr[1], in.own[1][k]+off)
			}
		}
	}
	for set := range in.ptr {
		in.arg[set] = make([]Arg, len(in.views))
		for k, p := range in.ptr[set] {
			in.arg[set][k] = p
		}
	}
	in.on = true
	return nil
}

// inputDst is where WriteInput copies input buffer i, and the fence the
// copy waits for; ok is false when the inputs are not double-buffered.
func (s *Session) inputDst(i int) (dst Ptr, f Fence, ok bool) {
	in := &s.pipe.in
	if !in.on {
		return 0, 0, false
	}
	for k, b := range in.inputs {
		if b == i {
			in.written[k], in.any = true, true
			next := in.cur ^ 1
			return in.own[next][k], in.fence[next], true
		}
	}
	return 0, 0, false
}

// takeInputs moves the session to the set the inputs were written into,
// before a launch that reads them.
func (s *Session) takeInputs() error {
	in := &s.pipe.in
	if !in.on || !in.any {
		return nil
	}
	next := in.cur ^ 1
	if err := s.dev.(CopyStreamer).JoinCopies(); err != nil {
		return err
	}
	carried := false
	for k, i := range in.inputs {
		if in.written[k] {
			continue
		}
		// Not written this time: the last value carries over.
		if err := s.dev.CopyDevice(in.own[next][k], in.own[in.cur][k], s.bytes(&s.plan.Buffers[i], s.maxEnv)); err != nil {
			return err
		}
		carried = true
	}
	if carried {
		// The copies read the current set: the next write into it
		// waits for them too, not only for the last launch.
		f, err := s.dev.(CopyStreamer).Fence()
		if err != nil {
			return err
		}
		in.fence[in.cur] = f
	}
	s.setInputs(next)
	clear(in.written)
	in.any = false
	return nil
}

// setInputs points the buffers at input set set.
func (s *Session) setInputs(set int) {
	in := &s.pipe.in
	s.ptrArg(0) // the boxed pointers exist
	for k, i := range in.views {
		s.ptrs[i], s.ptrArgs[i] = in.ptr[set][k], in.arg[set][k]
	}
	in.cur = set
}

// fenceInputs marks the main stream behind a launch that read the
// current set.
func (s *Session) fenceInputs() error {
	in := &s.pipe.in
	if !in.on {
		return nil
	}
	f, err := s.dev.(CopyStreamer).Fence()
	if err != nil {
		return err
	}
	in.fence[in.cur] = f
	return nil
}

// closeInputSets points the buffers back at the plan's set (carrying the
// current values over) and frees the second.
func (s *Session) closeInputSets() error {
	in := &s.pipe.in
	if !in.on {
		return nil
	}
	errs := []error{s.takeInputs()} // what was written and not yet read
	if in.cur == 1 {
		for k, i := range in.inputs {
			errs = append(errs, s.dev.CopyDevice(in.own[0][k], in.own[1][k], s.bytes(&s.plan.Buffers[i], s.maxEnv)))
		}
		s.setInputs(0)
	}
	errs = append(errs, s.dev.Sync(), s.dev.Free(in.base))
	*in = inputSets{}
	return errors.Join(errs...)
}
