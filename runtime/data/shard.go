package data

import "fmt"

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
func (l *Loader) Shard(rank, size int) {
	if size <= 0 || rank < 0 || rank >= size {
		panic(fmt.Sprintf("data.Loader.Shard: rank %d of %d", rank, size))
	}
	l.rank, l.size = rank, size
}

// padded is the epoch's sample count: the data set, padded to a multiple
// of the group size.
func (l *Loader) padded() int {
	return (l.ds.N + l.size - 1) / l.size * l.size
}
