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
