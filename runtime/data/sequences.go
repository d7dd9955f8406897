package data

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
)

// Sequences is a set of N token sequences of T i32 ids each, with targets:
// one class per sequence (YPer 1, the word-language task) or one next
// token per position (YPer T, the character language model).
//
// Variable-length sequences (words) are left-padded with PadID: Len holds
// each sequence's true length, and its tokens sit in the last Len
// positions, so the last position is always a real token. A model that
// reads the last hidden state must mask the padded steps (keep the state
// where the mask is 0) for padding not to change its result; Mask writes
// that mask.
type Sequences struct {
	X    []int32 // [N, T]
	Y    []int32 // [N, YPer]
	Len  []int32 // [N]; nil when every sequence is full
	N, T int
	YPer int
}

// PadID is the token id of padding in every vocabulary of this package.
const PadID = 0

// Mask writes, for sequences idx, 1 at real tokens and 0 at padding into
// m ([len(idx), T]): the step mask of dsl.Recurrent.Mask.
func (s *Sequences) Mask(m []int32, idx []int32) {
	for i, k := range idx {
		n := s.T
		if s.Len != nil {
			n = int(s.Len[k])
		}
		row := m[i*s.T : (i+1)*s.T]
		for t := range row {
			row[t] = 0
			if t >= s.T-n {
				row[t] = 1
			}
		}
	}
}

// hash64 is FNV-1a of s: the split of a sample depends on its text only,
// so it is the same on every machine and for every word-list version.
func hash64(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// SeqLoader cuts Sequences into batches, like Loader: each epoch visits
// the sequences once, in an order drawn from a PCG seeded with seed when
// shuffling, else in order.
type SeqLoader struct {
	DropLast bool

	s       *Sequences
	batch   int
	shuffle bool
	rng     *rand.Rand
	order   []int32
	pos     int
	x, y    []int32
	mask    []int32
	idx     []int32 // the batch's sequences
	// rank of size: this loader reads rank's shard of every global batch
	// (Shard); 0 of 1 unless Shard was called.
	rank, size int
}

// NewSeqLoader returns a loader over s with batches of batch sequences.
// A nil or inconsistent set and a batch size below 1 are errors.
func NewSeqLoader(s *Sequences, batch int, shuffle bool, seed uint64) (*SeqLoader, error) {
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("data.NewSeqLoader: %w", err)
	}
	if batch <= 0 {
		return nil, fmt.Errorf("data.NewSeqLoader: batch size %d, want > 0", batch)
	}
	rows := min(batch, max(s.N, 1)) // no batch holds more than the set
	l := &SeqLoader{s: s, batch: batch, shuffle: shuffle,
		rng:   rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		order: make([]int32, s.N),
		x:     make([]int32, rows*s.T), y: make([]int32, rows*s.YPer), mask: make([]int32, rows*s.T),
		idx: make([]int32, rows), size: 1}
	for i := range l.order {
		l.order[i] = int32(i)
	}
	l.Reset()
	return l, nil
}

// check reports a set whose slices disagree with its counts.
func (s *Sequences) check() error {
	switch {
	case s == nil:
		return fmt.Errorf("the sequences are nil")
	case s.N < 0 || s.T < 0 || s.YPer < 0 || s.N > math.MaxInt32:
		return fmt.Errorf("%d sequences of %d tokens with %d targets each", s.N, s.T, s.YPer)
	case s.T != 0 && s.N > len(s.X)/s.T, s.YPer != 0 && s.N > len(s.Y)/s.YPer,
		len(s.X) != s.N*s.T || len(s.Y) != s.N*s.YPer || (s.Len != nil && len(s.Len) != s.N):
		return fmt.Errorf("%d sequences of %d tokens with %d targets each hold %d tokens, %d targets and %d lengths", s.N, s.T, s.YPer, len(s.X), len(s.Y), len(s.Len))
	}
	return nil
}

// Reset starts a new epoch.
func (l *SeqLoader) Reset() {
	l.pos = 0
	if l.shuffle {
		l.rng.Shuffle(len(l.order), func(i, j int) { l.order[i], l.order[j] = l.order[j], l.order[i] })
	}
}

// Shard makes the loader rank's part of a data-parallel group of size
// processes, as Loader.Shard does: one shuffle on every rank (same seed),
// each global batch the next size·batch sequences of it, rank r the r-th
// contiguous slice, the epoch padded from its start to a multiple of
// size. Call it before the first Next. A rank outside [0, size), or a
// group whose global batch overflows an int, is an error and leaves the
// loader as it was.
func (l *SeqLoader) Shard(rank, size int) error {
	if size <= 0 || rank < 0 || rank >= size {
		return fmt.Errorf("data.SeqLoader.Shard: rank %d of a group of %d, want 0 ≤ rank < size", rank, size)
	}
	if l.batch > math.MaxInt/size || l.s.N > math.MaxInt-size {
		return fmt.Errorf("data.SeqLoader.Shard: a group of %d with batches of %d overflows", size, l.batch)
	}
	l.rank, l.size = rank, size
	return nil
}

// padded is the epoch's sequence count, padded to a multiple of the group.
func (l *SeqLoader) padded() int {
	return (l.s.N + l.size - 1) / l.size * l.size
}

// Len is the number of batches in one epoch.
func (l *SeqLoader) Len() int {
	n, g := l.padded(), l.batch*l.size
	if l.DropLast {
		return n / g
	}
	return (n + g - 1) / g
}

// Next returns the next batch: x [n, T] ids, y [n, YPer] targets and mask
// [n, T] (1 at real tokens), ok false when the epoch is over. The slices
// alias the loader's buffers until the next call.
func (l *SeqLoader) Next() (x, y, mask []int32, ok bool) {
	s := l.s
	g := min(l.batch*l.size, l.padded()-l.pos) // this global batch
	if g <= 0 || (l.DropLast && g < l.batch*l.size) {
		return nil, nil, nil, false
	}
	n := g / l.size
	from := l.pos + l.rank*n
	idx := l.idx[:n]
	for i := range idx {
		idx[i] = l.order[(from+i)%s.N] // past the end: padding, from the start
	}
	for i, k := range idx {
		copy(l.x[i*s.T:(i+1)*s.T], s.X[int(k)*s.T:(int(k)+1)*s.T])
		copy(l.y[i*s.YPer:(i+1)*s.YPer], s.Y[int(k)*s.YPer:(int(k)+1)*s.YPer])
	}
	s.Mask(l.mask, idx)
	l.pos += g
	return l.x[:n*s.T], l.y[:n*s.YPer], l.mask[:n*s.T], true
}

// Part is sequences [lo, hi) of s, sharing its storage: a rank's share of
// a split to evaluate.
func (s *Sequences) Part(lo, hi int) *Sequences {
	p := &Sequences{X: s.X[lo*s.T : hi*s.T], Y: s.Y[lo*s.YPer : hi*s.YPer], N: hi - lo, T: s.T, YPer: s.YPer}
	if s.Len != nil {
		p.Len = s.Len[lo:hi]
	}
	return p
}
