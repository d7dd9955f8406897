//go:build cuda

package cuda

import (
	"fmt"
	"time"

	"github.com/ngen-ml/ngen/runtime"
)

// The device track of a session's Chrome trace (runtime.WriteTrace): the
// Device is a runtime.DeviceTimer, through the CUDA-event timing of
// timing.go, which Session.SetProfiling turns on.

var _ runtime.DeviceTimer = (*Device)(nil)

// TimedCalls is the number of launches and GEMMs timed since event timing
// was turned on.
func (d *Device) TimedCalls() int {
	n := 0
	d.do(func() error {
		n = len(d.timer.events)
		return nil
	})
	return n
}

// DeviceSpans waits for the timed calls and returns each one's start
// (from the first one's start event) and GPU time, in call order. Unlike
// EventTimes it keeps the events, so a later call returns them again with
// any newer ones.
func (d *Device) DeviceSpans() ([]runtime.DeviceSpan, error) {
	var out []runtime.DeviceSpan
	err := d.do(func() error {
		t := &d.timer
		if len(t.events) == 0 {
			return nil
		}
		if err := t.events[len(t.events)-1][1].Synchronize(); err != nil {
			return fmt.Errorf("cuda: event timing: %v (last kernel launched: %s)", err, d.lastKernel)
		}
		first := t.events[0][0]
		for i, ev := range t.events {
			start, err := first.Elapsed(ev[0])
			if err != nil {
				return fmt.Errorf("cuda: event timing of %s: %v", t.names[i], err)
			}
			dur, err := ev[0].Elapsed(ev[1])
			if err != nil {
				return fmt.Errorf("cuda: event timing of %s: %v", t.names[i], err)
			}
			out = append(out, runtime.DeviceSpan{Name: t.names[i], Start: millis(start), Dur: millis(dur)})
		}
		return nil
	})
	return out, err
}

func millis(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
