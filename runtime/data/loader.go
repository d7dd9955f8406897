package data

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// Loader cuts a Dataset into batches, like torch.utils.data.DataLoader.
// One epoch is a run of Next calls until ok is false; Reset starts the next
// epoch, drawing a fresh order when shuffling. The order of every epoch
// depends only on the seed.
//
// Batches are copied into buffers that the Loader owns (Next) or that the
// caller passes (NextInto), so iterating allocates nothing.
type Loader struct {
	// DropLast skips the final batch of an epoch when it is short, as
	// DataLoader(drop_last=True) does. Set it before the first Next.
	DropLast bool

	ds      *Dataset
	batch   int
	shuffle bool
	rng     *rand.Rand
	order   []int32
	pos     int
	x       []float32
	y       []int32
	// rank of size: this loader reads rank's shard of every global batch
	// of size·batch samples (shard.go); 0 of 1 unless Shard was called.
	rank, size int
}

// NewLoader returns a loader over ds with batches of batch samples. With
// shuffle, each epoch visits the samples in an order drawn from a PCG seeded
// with seed; without it, in dataset order. A nil or inconsistent data set
// and a batch size below 1 are errors.
func NewLoader(ds *Dataset, batch int, shuffle bool, seed uint64) (*Loader, error) {
	if err := ds.check(); err != nil {
		return nil, fmt.Errorf("data.NewLoader: %w", err)
	}
	if batch <= 0 {
		return nil, fmt.Errorf("data.NewLoader: batch size %d, want > 0", batch)
	}
	// No batch holds more than the data set, so a batch size beyond it
	// (a user's -batch 1e18) sizes the buffers for the data set alone.
	rows := min(batch, max(ds.N, 1))
	l := &Loader{
		ds:      ds,
		batch:   batch,
		shuffle: shuffle,
		// The second PCG word is a fixed odd constant so that one seed
		// number is all a caller has to record to reproduce a run.
		rng:   rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		order: make([]int32, ds.N),
		x:     make([]float32, rows*ds.Features),
		y:     make([]int32, rows),
		size:  1,
	}
	for i := range l.order {
		l.order[i] = int32(i)
	}
	l.Reset()
	return l, nil
}

// check reports a data set whose slices disagree with its counts, which
// would make a batch read past them.
func (ds *Dataset) check() error {
	switch {
	case ds == nil:
		return fmt.Errorf("the data set is nil")
	case ds.N < 0 || ds.Features < 0 || ds.N > math.MaxInt32:
		return fmt.Errorf("data set of %d samples of %d features", ds.N, ds.Features)
	case ds.Features != 0 && ds.N > len(ds.X)/ds.Features, len(ds.X) != ds.N*ds.Features || len(ds.Y) != ds.N:
		return fmt.Errorf("data set of %d samples of %d features holds %d values and %d labels", ds.N, ds.Features, len(ds.X), len(ds.Y))
	}
	return nil
}

// Reset starts a new epoch, reshuffling when the loader shuffles.
func (l *Loader) Reset() {
	l.pos = 0
	if l.shuffle {
		l.rng.Shuffle(len(l.order), func(i, j int) { l.order[i], l.order[j] = l.order[j], l.order[i] })
	}
}

// Len is the number of batches in one epoch.
func (l *Loader) Len() int {
	n, g := l.padded(), l.batch*l.size
	if l.DropLast {
		return n / g
	}
	return (n + g - 1) / g
}

// BatchSize is the batch size the loader was made with.
func (l *Loader) BatchSize() int { return l.batch }

// Next returns the next batch of the epoch, ok false when the epoch is over.
// x is [n, Features] and y is [n], where n is the batch size except for a
// short last batch. The slices alias the loader's buffers and are valid until
// the next call.
func (l *Loader) Next() (x []float32, y []int32, ok bool) {
	n, ok := l.NextInto(l.x, l.y)
	if !ok {
		return nil, nil, false
	}
	return l.x[:n*l.ds.Features], l.y[:n], true
}

// NextInto is Next writing into the caller's buffers, which must hold a full
// batch; it returns the number of samples written. Use it to fill pinned or
// device-staging memory directly.
func (l *Loader) NextInto(x []float32, y []int32) (n int, ok bool) {
	g := min(l.batch*l.size, l.padded()-l.pos) // this global batch
	if g <= 0 || (l.DropLast && g < l.batch*l.size) {
		return 0, false
	}
	n = g / l.size
	f := l.ds.Features
	if len(x) < n*f || len(y) < n {
		panic(fmt.Sprintf("data.Loader.NextInto: buffers hold %d features and %d labels, batch needs %d and %d", len(x), len(y), n*f, n))
	}
	from := l.pos + l.rank*n
	for i := range n {
		s := l.order[(from+i)%l.ds.N] // past the end: padding, from the start
		copy(x[i*f:(i+1)*f], l.ds.X[int(s)*f:(int(s)+1)*f])
		y[i] = l.ds.Y[s]
	}
	l.pos += g
	return n, true
}
