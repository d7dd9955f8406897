package data

import (
	"slices"
	"testing"
)

// seqDataset has sample i with features {i, i+0.5} and label i, so a batch
// says which samples it holds.
func seqDataset(n int) *Dataset {
	ds := &Dataset{X: make([]float32, 2*n), Y: make([]int32, n), N: n, Features: 2}
	for i := range n {
		ds.X[2*i], ds.X[2*i+1] = float32(i), float32(i)+0.5
		ds.Y[i] = int32(i)
	}
	return ds
}

// epoch drains one epoch and returns the labels in order and the batch sizes.
func epoch(t *testing.T, l *Loader) (labels []int32, sizes []int) {
	t.Helper()
	for {
		x, y, ok := l.Next()
		if !ok {
			return labels, sizes
		}
		if len(x) != 2*len(y) {
			t.Fatalf("batch has %d features for %d labels", len(x), len(y))
		}
		for i, s := range y {
			if x[2*i] != float32(s) || x[2*i+1] != float32(s)+0.5 {
				t.Fatalf("sample %d: features %v do not belong to label %d", i, x[2*i:2*i+2], s)
			}
		}
		labels = append(labels, y...)
		sizes = append(sizes, len(y))
	}
}

func TestLoaderEveryEpochCoversAllOnce(t *testing.T) {
	const n = 103
	for _, shuffle := range []bool{false, true} {
		l := must(NewLoader(seqDataset(n), 10, shuffle, 7))
		var prev []int32
		for e := range 3 {
			got, sizes := epoch(t, l)
			if len(sizes) != l.Len() || l.Len() != 11 {
				t.Errorf("shuffle=%v epoch %d: %d batches, Len %d, want 11", shuffle, e, len(sizes), l.Len())
			}
			sorted := slices.Sorted(slices.Values(got))
			for i, s := range sorted {
				if s != int32(i) {
					t.Fatalf("shuffle=%v epoch %d: samples %v are not 0..%d once each", shuffle, e, sorted, n-1)
				}
			}
			if shuffle == slices.IsSorted(got) {
				t.Errorf("shuffle=%v epoch %d: order %v", shuffle, e, got)
			}
			if shuffle && slices.Equal(got, prev) {
				t.Errorf("epoch %d repeats the previous epoch's order; Reset should reshuffle", e)
			}
			prev = got
			l.Reset()
		}
	}
}

func TestLoaderDeterministicPerSeed(t *testing.T) {
	run := func(seed uint64) [][]int32 {
		l := must(NewLoader(seqDataset(50), 8, true, seed))
		var epochs [][]int32
		for range 3 {
			got, _ := epoch(t, l)
			epochs = append(epochs, got)
			l.Reset()
		}
		return epochs
	}
	a, b, c := run(1), run(1), run(2)
	for e := range a {
		if !slices.Equal(a[e], b[e]) {
			t.Errorf("epoch %d differs between two runs with seed 1", e)
		}
	}
	if slices.Equal(a[0], c[0]) {
		t.Errorf("seeds 1 and 2 gave the same first epoch")
	}
}

func TestLoaderLastPartialBatch(t *testing.T) {
	l := must(NewLoader(seqDataset(10), 4, false, 0))
	got, sizes := epoch(t, l)
	if !slices.Equal(sizes, []int{4, 4, 2}) || l.Len() != 3 || len(got) != 10 {
		t.Errorf("keep last: sizes %v Len %d", sizes, l.Len())
	}
	if _, _, ok := l.Next(); ok {
		t.Errorf("Next after the end of an epoch returned a batch")
	}

	l = must(NewLoader(seqDataset(10), 4, true, 0))
	l.DropLast = true
	for range 2 {
		got, sizes = epoch(t, l)
		if !slices.Equal(sizes, []int{4, 4}) || l.Len() != 2 {
			t.Errorf("drop last: sizes %v Len %d", sizes, l.Len())
		}
		l.Reset()
	}

	// An exact multiple has no short batch to drop.
	l = must(NewLoader(seqDataset(8), 4, false, 0))
	l.DropLast = true
	if _, sizes := epoch(t, l); !slices.Equal(sizes, []int{4, 4}) {
		t.Errorf("exact multiple with drop last: sizes %v", sizes)
	}
}

func TestLoaderNextIntoAndNoAllocs(t *testing.T) {
	l := must(NewLoader(seqDataset(64), 16, true, 3))
	x, y := make([]float32, 32), make([]int32, 16)
	n, ok := l.NextInto(x, y)
	if !ok || n != 16 || x[0] != float32(y[0]) {
		t.Fatalf("NextInto: n=%d ok=%v x[0]=%v y[0]=%v", n, ok, x[0], y[0])
	}
	allocs := testing.AllocsPerRun(20, func() {
		if _, _, ok := l.Next(); !ok {
			l.Reset()
		}
	})
	if allocs != 0 {
		t.Errorf("Next/Reset allocate %v times per call, want 0", allocs)
	}
}

// must is v, failing the test (by panicking) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
