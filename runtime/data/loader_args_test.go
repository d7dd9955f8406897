package data

import (
	"math"
	"strings"
	"testing"
)

// TestLoaderBadArguments: NewLoader, NewSeqLoader and Shard panicked on
// a batch size below 1 and a rank outside the group (issue 13); they
// return errors naming the function, and a failed Shard leaves the loader
// as it was.
func TestLoaderBadArguments(t *testing.T) {
	for name, c := range map[string]struct {
		ds    *Dataset
		batch int
		want  string
	}{
		"batch 0":          {seqDataset(4), 0, "batch size 0"},
		"batch -3":         {seqDataset(4), -3, "batch size -3"},
		"nil data set":     {nil, 4, "nil"},
		"short X":          {&Dataset{X: make([]float32, 3), Y: make([]int32, 2), N: 2, Features: 2}, 1, "holds 3 values"},
		"short Y":          {&Dataset{X: make([]float32, 4), Y: make([]int32, 1), N: 2, Features: 2}, 1, "1 labels"},
		"N·Features wraps": {&Dataset{X: make([]float32, 2), Y: make([]int32, 2), N: 2, Features: math.MaxInt/2 + 2}, 1, "holds"},
		"negative N":       {&Dataset{N: -1, Features: 2}, 1, "-1 samples"},
	} {
		l, err := NewLoader(c.ds, c.batch, true, 1)
		if err == nil || l != nil || !strings.Contains(err.Error(), "data.NewLoader: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, %v", name, l, err)
		}
	}
	// A batch beyond the data set sizes the buffers for the data set.
	l, err := NewLoader(seqDataset(5), math.MaxInt, false, 0)
	if err != nil || len(l.x) != 10 {
		t.Fatalf("huge batch: %v", err)
	}
	if got, sizes := epoch(t, l); len(got) != 5 || len(sizes) != 1 {
		t.Fatalf("huge batch: %v %v", got, sizes)
	}

	for _, rs := range [][2]int{{-1, 2}, {2, 2}, {0, 0}, {0, -1}, {5, 3}} {
		l := must(NewLoader(seqDataset(10), 2, true, 1))
		err := l.Shard(rs[0], rs[1])
		if err == nil || !strings.Contains(err.Error(), "data.Loader.Shard: ") {
			t.Errorf("Shard(%d, %d): %v", rs[0], rs[1], err)
		}
		if l.rank != 0 || l.size != 1 || l.Len() != 5 {
			t.Errorf("Shard(%d, %d) changed the loader", rs[0], rs[1])
		}
	}
	big := must(NewLoader(seqDataset(10), math.MaxInt/2, true, 1))
	if err := big.Shard(1, 3); err == nil || !strings.Contains(err.Error(), "overflows") {
		t.Errorf("global batch overflow: %v", err)
	}

	seqs := &Sequences{X: make([]int32, 6), Y: make([]int32, 2), N: 2, T: 3, YPer: 1}
	for name, c := range map[string]struct {
		s     *Sequences
		batch int
		want  string
	}{
		"batch 0":       {seqs, 0, "batch size 0"},
		"nil":           {nil, 2, "nil"},
		"short X":       {&Sequences{X: make([]int32, 5), Y: make([]int32, 2), N: 2, T: 3, YPer: 1}, 2, "hold 5 tokens"},
		"short Y":       {&Sequences{X: make([]int32, 6), Y: make([]int32, 1), N: 2, T: 3, YPer: 1}, 2, "1 targets"},
		"Len of 1 of 2": {&Sequences{X: make([]int32, 6), Y: make([]int32, 2), Len: []int32{3}, N: 2, T: 3, YPer: 1}, 2, "1 lengths"},
	} {
		l, err := NewSeqLoader(c.s, c.batch, false, 0)
		if err == nil || l != nil || !strings.Contains(err.Error(), "data.NewSeqLoader: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("sequences, %s: %v, %v", name, l, err)
		}
	}
	sl, err := NewSeqLoader(seqs, 1<<62, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	if x, y, _, ok := sl.Next(); !ok || len(x) != 6 || len(y) != 2 {
		t.Fatalf("huge sequence batch: %v %v %v", x, y, ok)
	}
}
