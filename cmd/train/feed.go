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
	pipeline = flag.String("pipeline", "auto", "image models: read each training step's status back one step late, so the host queues the next step while the device runs this one (runtime.Session.SetPipelined): auto (on for a device that reads back asynchronously: cuda), on or off")
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

// trainEpoch runs one epoch of steps, until Next says the epoch is over,
// then the update of any micro-batches left pending. It returns the
// summed loss, the step count and the time spent waiting for batches.
// each, when not nil, sees every step's loss and rows and the running sum
// and count; its error ends the epoch. A pipelined session
// (runtime.Session.SetPipelined) judges each step during the next call,
// so each sees a step's loss one call late, and the epoch ends with a
// Flush: the same losses, in the same order.
func trainEpoch(m model, src batches, each func(loss float32, rows int, sum float64, n int) error) (sum float64, n int, wait time.Duration, err error) {
	s := m.Session()
	var losses []float64
	var rows []int // the rows of the steps not judged yet
	judged := func() error {
		losses = s.TakeLosses(losses[:0])
		for _, l := range losses {
			sum += float64(float32(l))
			n++
			r := rows[0]
			rows = rows[1:]
			if each != nil {
				if err := each(float32(l), r, sum, n); err != nil {
					return err
				}
			}
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
		if s.Pipelined() {
			// An error is the step before's (judged in this call).
			if err != nil {
				return 0, n, wait, fmt.Errorf("step %d: %w", n+1, err)
			}
			rows = append(rows, len(y))
			if err := judged(); err != nil {
				return 0, n, wait, err
			}
			continue
		}
		if err != nil {
			return 0, n, wait, fmt.Errorf("step %d: %w", n+1, err)
		}
		sum += float64(loss)
		n++
		if each != nil {
			if err := each(loss, len(y), sum, n); err != nil {
				return 0, n, wait, err
			}
		}
	}
	if err := s.Flush(); err != nil {
		return 0, n, wait, fmt.Errorf("step %d: %w", n+1, err)
	}
	if err := judged(); err != nil {
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
