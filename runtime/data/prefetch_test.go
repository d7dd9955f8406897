package data

import (
	"slices"
	"testing"
)

// TestPrefetcherMatchesLoader: the prefetcher hands out the loader's own
// batches in the loader's order, over several shuffled epochs, while the
// caller holds each batch until its next call.
func TestPrefetcherMatchesLoader(t *testing.T) {
	ds := &Dataset{N: 103, Features: 3}
	for i := 0; i < ds.N; i++ {
		ds.X = append(ds.X, float32(i), float32(2*i), float32(3*i))
		ds.Y = append(ds.Y, int32(i%10))
	}
	plain := NewLoader(ds, 8, true, 5)
	pre := NewPrefetcher(NewLoader(ds, 8, true, 5))
	for epoch := 0; epoch < 3; epoch++ {
		n := 0
		for {
			x1, y1, ok1 := plain.Next()
			x2, y2, ok2 := pre.Next()
			if ok1 != ok2 {
				t.Fatalf("epoch %d batch %d: ok %v and %v", epoch, n, ok1, ok2)
			}
			if !ok1 {
				break
			}
			if !slices.Equal(x1, x2) || !slices.Equal(y1, y2) {
				t.Fatalf("epoch %d batch %d differs", epoch, n)
			}
			n++
		}
		if n != plain.Len() {
			t.Fatalf("epoch %d: %d batches, want %d", epoch, n, plain.Len())
		}
		plain.Reset()
		pre.Reset()
	}
	_ = pre.Wait()
}
