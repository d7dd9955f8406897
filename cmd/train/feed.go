package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/ngen-ml/ngen/runtime/data"
)

var prefetch = flag.Bool("prefetch", true, "fill the next batch on another goroutine while a step runs")

// batches yields one epoch of training batches at a time: a data.Loader,
// or a data.Prefetcher that fills the next batch while the step runs.
type batches interface {
	Next() (x []float32, y []int32, ok bool)
	Reset()
}

func newBatches(l *data.Loader) batches {
	if *prefetch {
		return data.NewPrefetcher(l)
	}
	return l
}

// trainEpoch runs one epoch of steps, until Next says the epoch is over,, then the update of any micro-batches
// left pending. It returns the summed loss, the step count and the time
// spent waiting for batches.
func trainEpoch(m model, src batches, each func(sum float64, n int)) (sum float64, n int, wait time.Duration, err error) {
	for {
		t0 := time.Now()
		x, y, ok := src.Next()
		wait += time.Since(t0)
		if !ok {
			break
		}
		loss, err := m.Step(x, y)
		if err != nil {
			return 0, n, wait, fmt.Errorf("step %d: %w", n+1, err)
		}
		sum += float64(loss)
		n++
		if each != nil {
			each(sum, n)
		}
	}
	if m.Session().Pending() > 0 {
		// The epoch's last micro-batches update too.
		if err := m.Session().RunUpdate(); err != nil {
			return 0, n, wait, err
		}
	}
	src.Reset()
	return sum, n, wait, nil
}
