package data

import (
	"fmt"
	"math"
)

// Shard makes the loader rank's part of a data-parallel group of size
// processes, with DistributedSampler's guarantees: every rank builds its
// loader with the same seed, so all draw one shuffle; each global batch
// is the next size·batch samples of it, and rank r takes the r-th
// contiguous slice of batch samples (torch interleaves ranks instead; a
// contiguous slice is what numbers rank r's rows r·b.. of the global
// batch, as dropout's global sample index assumes). The epoch is padded
// with samples from its start to a multiple of size, as DistributedSampler
// pads, so every rank gets batches of one size (a short last global batch
// gives each rank the same share of it). Call it before the first Next.
// A rank outside [0, size), or a group whose global batch or padded epoch
// overflows an int, is an error and leaves the loader as it was.
func (l *Loader) Shard(rank, size int) error {
	if size <= 0 || rank < 0 || rank >= size {
		return fmt.Errorf("data.Loader.Shard: rank %d of a group of %d, want 0 ≤ rank < size", rank, size)
	}
	if l.batch > math.MaxInt/size || l.ds.N > math.MaxInt-size {
		return fmt.Errorf("data.Loader.Shard: a group of %d with batches of %d overflows", size, l.batch)
	}
	l.rank, l.size = rank, size
	return nil
}

// padded is the epoch's sample count: the data set, padded to a multiple
// of the group size.
func (l *Loader) padded() int {
	return (l.ds.N + l.size - 1) / l.size * l.size
}
