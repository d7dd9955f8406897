//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/ngen-ml/ngen/runtime"
)

// The copy stream (runtime.CopyStreamer): a second stream on which a
// pipelined session copies the next step's inputs while the step in
// flight runs on the device's stream (runtime/pipeline_inputs.go). A
// fence is an event recorded on the device's stream; a copy waits for
// its fence on the copy stream (cuStreamWaitEvent), and JoinCopies makes
// the device's stream wait for an event recorded behind the last copy.
// Made on first use; every call runs on the device thread, outside any
// graph being recorded (do ends a recording first).

// fenceRing is how many fences keep their own event. A fence whose event
// a later fence has re-recorded is waited for at that later point, which
// is still behind the work queued when the copy was queued.
const fenceRing = 8

type copyStream struct {
	on      bool
	s       cu.Stream
	fences  [fenceRing]cu.Event
	n       runtime.Fence // fences recorded
	done    cu.Event      // recorded behind the last copy
	pending bool          // done recorded and not yet joined
}

func (c *copyStream) open() error {
	if c.on {
		return nil
	}
	var err error
	if c.s, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return fmt.Errorf("cuda: the copy stream: cuStreamCreate: %v", err)
	}
	for i := range c.fences {
		if c.fences[i], err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return fmt.Errorf("cuda: the copy stream: cuEventCreate: %v", err)
		}
	}
	if c.done, err = cu.MakeEvent(cu.DisableTiming); err != nil {
		return fmt.Errorf("cuda: the copy stream: cuEventCreate: %v", err)
	}
	c.on = true
	return nil
}

func (c *copyStream) release() error {
	if !c.on {
		return nil
	}
	errs := []error{c.s.Synchronize()}
	for i := range c.fences {
		errs = append(errs, cu.DestroyEvent(&c.fences[i]))
	}
	errs = append(errs, cu.DestroyEvent(&c.done), c.s.Destroy())
	*c = copyStream{}
	return errors.Join(errs...)
}

// Fence records a fence on the device's stream behind the work queued so
// far.
func (d *Device) Fence() (runtime.Fence, error) {
	var f runtime.Fence
	err := d.do(func() error {
		if err := d.cs.open(); err != nil {
			return err
		}
		d.cs.n++
		if err := d.cs.fences[d.cs.n%fenceRing].Record(d.stream); err != nil {
			return fmt.Errorf("cuda: fence: %v", err)
		}
		f = d.cs.n
		return nil
	})
	return f, err
}

// CopyToDeviceAfter queues the copy of bytes bytes from host memory src
// to dst on the copy stream, once fence f (0: none) has passed on the
// device's stream.
func (d *Device) CopyToDeviceAfter(f runtime.Fence, dst runtime.Ptr, src unsafe.Pointer, bytes int64) error {
	ok, err := checkRange("copy to device", bytes, uintptr(dst), uintptr(src))
	if !ok {
		return d.closedOr(err)
	}
	return d.do(func() error {
		if err := d.cs.open(); err != nil {
			return err
		}
		if f > d.cs.n {
			return fmt.Errorf("cuda: copy after fence %d, which was never recorded (%d were)", f, d.cs.n)
		}
		if f > 0 {
			if err := d.cs.s.Wait(d.cs.fences[f%fenceRing], 0); err != nil {
				return fmt.Errorf("cuda: copy stream: cuStreamWaitEvent: %v", err)
			}
		}
		if err := d.toDevice(d.cs.s, dst, src, bytes); err != nil {
			return err
		}
		if err := d.cs.done.Record(d.cs.s); err != nil {
			return fmt.Errorf("cuda: copy stream: %v", err)
		}
		d.cs.pending = true
		return nil
	})
}

// JoinCopies makes the device's stream wait for the copies queued on the
// copy stream so far.
func (d *Device) JoinCopies() error {
	return d.do(func() error {
		if !d.cs.pending {
			return nil
		}
		if err := d.stream.Wait(d.cs.done, 0); err != nil {
			return fmt.Errorf("cuda: joining the copy stream: cuStreamWaitEvent: %v", err)
		}
		d.cs.pending = false
		return nil
	})
}

var _ runtime.CopyStreamer = (*Device)(nil)
