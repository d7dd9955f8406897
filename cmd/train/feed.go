package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/data"
)

var (
	prefetch = flag.Bool("prefetch", true, "fill the next batch on another goroutine while a step runs")
	pipeline = flag.String("pipeline", "auto", "read each training step's status back one step late, so the host queues the next step while the device runs this one (runtime.Session.SetPipelined): auto (on for a device that reads back asynchronously: cuda), on or off")
)

// setPipelined applies -pipeline to the session on dev.
func setPipelined(s *runtime.Session, dev runtime.Device) error {
	switch *pipeline {
	case "off":
		return nil
	case "on":
		return s.SetPipelined(true)
	case "auto":
		if _, ok := dev.(runtime.AsyncReader); ok {
			return s.SetPipelined(true)
		}
		return nil
	}
	return fmt.Errorf("-pipeline %q: want auto, on or off", *pipeline)
}

// batches yields one epoch of training batches at a time: a data.Loader,
// or a data.Prefetcher that fills the next batch while the step runs.
type batches interface {
	Next() (x []float32, y []int32, ok bool)
	Reset()
}

// newBatches prefetches unless -prefetch=false, into the device's pinned
// host memory when it has some (the GPU), so that each input copy is one
// asynchronous DMA. close frees those buffers.
func newBatches(l *data.Loader, dev runtime.Device) (src batches, close func() error, err error) {
	if !*prefetch {
		return l, func() error { return nil }, nil
	}
	if h, ok := dev.(runtime.HostAllocator); ok {
		p, err := data.NewPinnedPrefetcher(l, h)
		if err != nil {
			return nil, nil, err
		}
		return p, p.Close, nil
	}
	p := data.NewPrefetcher(l)
	return p, p.Close, nil
}

// judged hands a training loop each step's loss with its rows, in order,
// whether the session judges a step in its own call or, pipelined
// (runtime.Session.SetPipelined), in the next one: for a pipelined
// session each call's error is the step before's, and the epoch ends
// with flush.
type judged struct {
	s      *runtime.Session
	losses []float64
	rows   []int // the rows of the calls not judged yet
}

// step records a call that returned loss and err for a batch of rows
// rows, and calls each for every step judged since; its error, or the
// call's, ends the loop. n is the number of steps judged before it.
func (j *judged) step(loss float32, rows int, err error, n int, each func(loss float32, rows int) error) error {
	if err != nil {
		return fmt.Errorf("step %d: %w", n+1, err)
	}
	if !j.s.Pipelined() {
		return each(loss, rows)
	}
	j.rows = append(j.rows, rows)
	return j.take(each)
}

func (j *judged) take(each func(loss float32, rows int) error) error {
	j.losses = j.s.TakeLosses(j.losses[:0])
	for _, l := range j.losses {
		r := j.rows[0]
		j.rows = j.rows[1:]
		if err := each(float32(l), r); err != nil {
			return err
		}
	}
	return nil
}

// flush judges the step in flight at the end of an epoch.
func (j *judged) flush(n int, each func(loss float32, rows int) error) error {
	if err := j.s.Flush(); err != nil {
		return fmt.Errorf("step %d: %w", n+1, err)
	}
	return j.take(each)
}

// trainEpoch runs one epoch of steps, until Next says the epoch is over,
// then the update of any micro-batches left pending. It returns the
// summed loss, the step count and the time spent waiting for batches.
// each, when not nil, sees every step's loss and rows and the running sum
// and count; its error ends the epoch. With a pipelined session each
// sees a step's loss a call late (judged): the same losses, in order.
func trainEpoch(m model, src batches, each func(loss float32, rows int, sum float64, n int) error) (sum float64, n int, wait time.Duration, err error) {
	s := m.Session()
	j := judged{s: s}
	got := func(loss float32, rows int) error {
		sum += float64(loss)
		n++
		if each != nil {
			return each(loss, rows, sum, n)
		}
		return nil
	}
	for {
		t0 := time.Now()
		x, y, ok := src.Next()
		wait += time.Since(t0)
		if !ok {
			break
		}
		loss, err := m.Step(x, y)
		if err := j.step(loss, len(y), err, n, got); err != nil {
			return 0, n, wait, err
		}
	}
	if err := j.flush(n, got); err != nil {
		return 0, n, wait, err
	}
	if s.Pending() > 0 {
		// The epoch's last micro-batches update too.
		if err := s.RunUpdate(); err != nil {
			return 0, n, wait, err
		}
	}
	src.Reset()
	return sum, n, wait, nil
}
