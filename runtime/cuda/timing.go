//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"time"

	"gorgonia.org/cu"
)

// LaunchTime is the GPU time of one kernel launch or GEMM, measured with a
// pair of CUDA events recorded on the stream around it, so it excludes the
// host's launch overhead and needs no synchronisation per launch.
type LaunchTime struct {
	Name string // the kernel's name, or "gemm"
	Time time.Duration
}

// timer holds the event pairs recorded since timing was turned on. It is
// owned by the device thread.
type timer struct {
	on     bool
	names  []string
	events [][2]cu.Event
}

// SetEventTiming turns CUDA-event timing of every Launch and Gemm on or
// off; turning it on (or off) drops what was recorded. Each timed call
// records two events, a few microseconds of host time, so leave it off
// outside benchmarks.
func (d *Device) SetEventTiming(on bool) error {
	return d.do(func() error {
		err := d.timer.release()
		d.timer.on = on
		return err
	})
}

// EventTimes waits for the stream and returns the time of every Launch and
// Gemm since timing was turned on (or since the last EventTimes), in call
// order.
func (d *Device) EventTimes() ([]LaunchTime, error) {
	var out []LaunchTime
	err := d.do(func() error {
		t := &d.timer
		if len(t.events) > 0 {
			if err := t.events[len(t.events)-1][1].Synchronize(); err != nil {
				return fmt.Errorf("cuda: event timing: %v (last kernel launched: %s)", err, d.lastKernel)
			}
		}
		for i, ev := range t.events {
			ms, err := ev[0].Elapsed(ev[1])
			if err != nil {
				return fmt.Errorf("cuda: event timing of %s: %v", t.names[i], err)
			}
			out = append(out, LaunchTime{Name: t.names[i], Time: time.Duration(ms * float64(time.Millisecond))})
		}
		return t.release()
	})
	return out, err
}

// around runs enqueue between two events on the stream when timing is on.
// It runs on the device thread.
func (t *timer) around(stream cu.Stream, name string, enqueue func() error) error {
	if !t.on {
		return enqueue()
	}
	var ev [2]cu.Event
	var err error
	for i := range ev {
		if ev[i], err = cu.MakeEvent(cu.DefaultEvent); err != nil {
			err = fmt.Errorf("cuda: event timing: cuEventCreate: %v", err)
			break
		}
	}
	if err == nil {
		if err = ev[0].Record(stream); err != nil {
			err = fmt.Errorf("cuda: event timing: cuEventRecord: %v", err)
		}
	}
	if err == nil {
		err = enqueue()
	}
	if err == nil {
		if err = ev[1].Record(stream); err != nil {
			err = fmt.Errorf("cuda: event timing: cuEventRecord: %v", err)
		}
	}
	if err != nil {
		// A pair that was not recorded in full cannot be read back.
		for i := range ev {
			if ev[i] != (cu.Event{}) {
				cu.DestroyEvent(&ev[i])
			}
		}
		return err
	}
	t.names = append(t.names, name)
	t.events = append(t.events, ev)
	return nil
}

// release destroys the recorded events, on the device thread.
func (t *timer) release() error {
	var errs []error
	for i := range t.events {
		for j := range t.events[i] {
			if err := cu.DestroyEvent(&t.events[i][j]); err != nil {
				errs = append(errs, err)
			}
		}
	}
	t.names, t.events = nil, nil
	return errors.Join(errs...)
}
