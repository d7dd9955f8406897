package data

import (
	"errors"
	"sync"
	"time"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// Prefetcher fills the next batch on its own goroutine while the caller
// trains on the current one (double buffering), as DataLoader's worker
// does: two batch buffers, one the caller holds and one being filled. The
// batches and their order are the Loader's own, so prefetching changes no
// result. NewPinnedPrefetcher puts the two buffers in a device's
// page-locked host memory (runtime.HostAllocator: the CUDA backend), so the
// copy to the device is one asynchronous DMA from the buffer itself.
type Prefetcher struct {
	l          *Loader
	free, full chan *slot
	cur        *slot
	wait       time.Duration
	host       runtime.HostAllocator // nil: Go memory
	slots      []*slot
	err        error // the first slot error Next saw
	stop       chan struct{}
	running    sync.WaitGroup // the filling goroutine
}

type slot struct {
	x  []float32
	y  []int32
	n  int
	ok bool
	// mem are the slot's pinned blocks (x, y), waited for before a refill.
	mem []unsafe.Pointer
	err error // from WaitHost, passed to the caller with the slot
}

// NewPrefetcher starts filling the loader's current epoch. The caller
// must not use the loader directly while the prefetcher runs.
func NewPrefetcher(l *Loader) *Prefetcher {
	p := &Prefetcher{l: l, free: make(chan *slot, 2), full: make(chan *slot, 2), stop: make(chan struct{})}
	for range 2 {
		p.free <- &slot{x: make([]float32, len(l.x)), y: make([]int32, len(l.y))}
	}
	p.start()
	return p
}

// NewPinnedPrefetcher is NewPrefetcher with the buffers in h's pinned
// host memory; Close frees them.
func NewPinnedPrefetcher(l *Loader, h runtime.HostAllocator) (*Prefetcher, error) {
	p := &Prefetcher{l: l, free: make(chan *slot, 2), full: make(chan *slot, 2), stop: make(chan struct{}), host: h}
	for range 2 {
		s := &slot{}
		xb, err := h.AllocHost(int64(len(l.x) * 4))
		if err == nil {
			s.mem = append(s.mem, xb)
			var yb unsafe.Pointer
			if yb, err = h.AllocHost(int64(len(l.y) * 4)); err == nil {
				s.mem = append(s.mem, yb)
				s.x = unsafe.Slice((*float32)(xb), len(l.x))
				s.y = unsafe.Slice((*int32)(yb), len(l.y))
			}
		}
		p.slots = append(p.slots, s)
		p.free <- s
		if err != nil {
			p.Close()
			return nil, err
		}
	}
	p.start()
	return p, nil
}

// Close stops filling and frees pinned buffers; the prefetcher is not used
// afterwards.
func (p *Prefetcher) Close() error {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	p.running.Wait()
	if p.host == nil {
		return nil
	}
	var errs []error
	for _, s := range p.slots {
		for _, m := range s.mem {
			errs = append(errs, p.host.FreeHost(m))
		}
		s.mem = nil
	}
	p.host = nil
	return errors.Join(errs...)
}

func (p *Prefetcher) start() {
	p.running.Add(1)
	go func() {
		defer p.running.Done()
		for {
			var s *slot
			select {
			case s = <-p.free:
			case <-p.stop:
				return
			}
			for _, m := range s.mem {
				// The device may still be copying the batch this slot held.
				if err := p.host.WaitHost(m); err != nil && s.err == nil {
					s.err = err
				}
			}
			s.n, s.ok = p.l.NextInto(s.x, s.y)
			ok := s.ok // s belongs to the caller once sent
			p.full <- s
			if !ok {
				return
			}
		}
	}()
}

// Next is Loader.Next: the next batch of the epoch, ok false when it is
// over. The slices are valid until the next call.
func (p *Prefetcher) Next() (x []float32, y []int32, ok bool) {
	if p.cur != nil {
		p.free <- p.cur
		p.cur = nil
	}
	t0 := time.Now()
	s := <-p.full
	p.wait += time.Since(t0)
	if s.err != nil && p.err == nil {
		p.err = s.err
	}
	if !s.ok {
		p.free <- s
		return nil, nil, false
	}
	p.cur = s
	return s.x[:s.n*p.l.ds.Features], s.y[:s.n], true
}

// Err is the first error waiting for the device to finish reading a
// pinned buffer; batches after it may have been filled early.
func (p *Prefetcher) Err() error { return p.err }

// Reset starts the next epoch (Loader.Reset) once Next has reported the
// end of the current one.
func (p *Prefetcher) Reset() {
	p.l.Reset()
	p.start()
}

// Wait is the time Next spent waiting for a batch since the last call,
// and starts counting again.
func (p *Prefetcher) Wait() time.Duration {
	w := p.wait
	p.wait = 0
	return w
}
