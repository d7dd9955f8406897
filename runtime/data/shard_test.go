package data

import (
	"slices"
	"testing"
)

// TestShardSplitsGlobalBatches: for 3 ranks with batch 2 over 11 samples
// (padded to 12), each global batch of 6 is the unsharded loader's batch
// of 6 from the same seed, rank r holding its r-th slice of 2; the short
// last global batch is split evenly; every epoch reshuffles alike.
func TestShardSplitsGlobalBatches(t *testing.T) {
	const n, b, size, seed = 11, 2, 3, 5
	whole := must(NewLoader(seqDataset(n), b*size, true, seed))
	ranks := make([]*Loader, size)
	for r := range ranks {
		ranks[r] = must(NewLoader(seqDataset(n), b, true, seed))
		if err := ranks[r].Shard(r, size); err != nil {
			t.Fatal(err)
		}
		if got := ranks[r].Len(); got != 2 {
			t.Fatalf("rank %d: Len %d, want 2 global batches", r, got)
		}
	}
	for ep := 0; ep < 2; ep++ {
		want, _ := epoch(t, whole)
		want = append(want, want[0]) // the padding repeats the epoch's first sample
		var got []int32
		sizes := make([][]int, size)
		for batch := 0; ; batch++ {
			var global []int32
			for r, l := range ranks {
				_, y, ok := l.Next()
				if !ok {
					global = nil
					break
				}
				sizes[r] = append(sizes[r], len(y))
				global = append(global, y...)
			}
			if global == nil {
				break
			}
			got = append(got, global...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("epoch %d: ranks' batches, rank by rank, are %v, want %v", ep, got, want)
		}
		for r := range ranks {
			if !slices.Equal(sizes[r], []int{2, 2}) {
				t.Fatalf("epoch %d: rank %d batch sizes %v, want [2 2]", ep, r, sizes[r])
			}
			ranks[r].Reset()
		}
		whole.Reset()
	}
}

// TestSeqShardSplitsGlobalBatches: a SeqLoader's shards, read rank by rank,
// are the whole loader's batches of size·b sequences (with the epoch
// padded from its start), with the masks of their sequences; a group of
// one reads what an unsharded loader reads.
func TestSeqShardSplitsGlobalBatches(t *testing.T) {
	const n, b, size, seed = 11, 2, 3, 5
	mk := func(batch int) *SeqLoader {
		s := &Sequences{X: make([]int32, 3*n), Y: make([]int32, n), Len: make([]int32, n), N: n, T: 3, YPer: 1}
		for i := range n {
			s.X[3*i], s.X[3*i+1], s.X[3*i+2] = 0, int32(i), int32(i)
			s.Y[i], s.Len[i] = int32(i), int32(1+i%3)
		}
		l, err := NewSeqLoader(s, batch, true, seed)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	drain := func(ls ...*SeqLoader) (ys []int32, masks []int32) {
		for {
			for _, l := range ls {
				x, y, mask, ok := l.Next()
				if !ok {
					return ys, masks
				}
				for i, c := range y {
					if x[3*i+1] != c {
						t.Fatalf("sequence %v does not belong to target %d", x[3*i:3*i+3], c)
					}
				}
				ys, masks = append(ys, y...), append(masks, mask...)
			}
		}
	}
	whole := mk(b * size)
	ranks := make([]*SeqLoader, size)
	for r := range ranks {
		ranks[r] = mk(b)
		if err := ranks[r].Shard(r, size); err != nil {
			t.Fatal(err)
		}
		if got := ranks[r].Len(); got != 2 {
			t.Fatalf("rank %d: Len %d, want 2 global batches", r, got)
		}
	}
	for ep := 0; ep < 2; ep++ {
		want, wmask := drain(whole)
		want, wmask = append(want, want[0]), append(wmask, wmask[:3]...) // the padding repeats the first sequence
		got, gmask := drain(ranks...)
		if !slices.Equal(got, want) || !slices.Equal(gmask, wmask) {
			t.Fatalf("epoch %d: the ranks read %v (masks %v), want %v (%v)", ep, got, gmask, want, wmask)
		}
		whole.Reset()
		for _, l := range ranks {
			l.Reset()
		}
	}
	one, plain := mk(4), mk(4)
	if err := one.Shard(0, 1); err != nil {
		t.Fatal(err)
	}
	a, am := drain(one)
	p, pm := drain(plain)
	if !slices.Equal(a, p) || !slices.Equal(am, pm) {
		t.Fatalf("a group of one reads %v, an unsharded loader %v", a, p)
	}
	if err := one.Shard(1, 1); err == nil {
		t.Fatal("rank 1 of 1 accepted")
	}
}
