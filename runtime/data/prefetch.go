package data

import "time"

// Prefetcher fills the next batch on its own goroutine while the caller
// trains on the current one (double buffering), as DataLoader's worker
// does: two batch buffers, one the caller holds and one being filled. The
// batches and their order are the Loader's own, so prefetching changes no
// result. On the GPU the filled buffer is the host side of the input
// copy; a backend that copies asynchronously from pinned memory (see
// runtime/cuda) overlaps that copy with the previous step too.
type Prefetcher struct {
	l          *Loader
	free, full chan *slot
	cur        *slot
	wait       time.Duration
}

type slot struct {
	x  []float32
	y  []int32
	n  int
	ok bool
}

// NewPrefetcher starts filling the loader's current epoch. The caller
// must not use the loader directly while the prefetcher runs.
func NewPrefetcher(l *Loader) *Prefetcher {
	p := &Prefetcher{l: l, free: make(chan *slot, 2), full: make(chan *slot, 2)}
	for range 2 {
		p.free <- &slot{x: make([]float32, l.batch*l.ds.Features), y: make([]int32, l.batch)}
	}
	p.start()
	return p
}

func (p *Prefetcher) start() {
	go func() {
		for {
			s := <-p.free
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
	if !s.ok {
		p.free <- s
		return nil, nil, false
	}
	p.cur = s
	return s.x[:s.n*p.l.ds.Features], s.y[:s.n], true
}

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
