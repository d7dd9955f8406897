package data

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"unsafe"
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
	plain := must(NewLoader(ds, 8, true, 5))
	pre := NewPrefetcher(must(NewLoader(ds, 8, true, 5)))
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

// fakePinned is a HostAllocator in Go memory that checks the prefetcher
// waits for a block's copy before refilling it.
type fakePinned struct {
	blocks map[unsafe.Pointer][]byte
	waits  atomic.Int64
}

func (f *fakePinned) AllocHost(n int64) (unsafe.Pointer, error) {
	b := make([]byte, n)
	p := unsafe.Pointer(&b[0])
	f.blocks[p] = b
	return p, nil
}

func (f *fakePinned) FreeHost(p unsafe.Pointer) error {
	if _, ok := f.blocks[p]; !ok {
		return errors.New("not allocated")
	}
	delete(f.blocks, p)
	return nil
}

func (f *fakePinned) WaitHost(p unsafe.Pointer) error {
	f.waits.Add(1)
	return nil
}

// TestPinnedPrefetcher: buffers from a HostAllocator give the loader's
// batches, every refill waits for the block first, and Close frees them.
func TestPinnedPrefetcher(t *testing.T) {
	ds := &Dataset{N: 50, Features: 4}
	for i := 0; i < ds.N*ds.Features; i++ {
		ds.X = append(ds.X, float32(i))
	}
	for i := 0; i < ds.N; i++ {
		ds.Y = append(ds.Y, int32(i))
	}
	h := &fakePinned{blocks: map[unsafe.Pointer][]byte{}}
	plain := must(NewLoader(ds, 8, true, 3))
	pre, err := NewPinnedPrefetcher(must(NewLoader(ds, 8, true, 3)), h)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.blocks) != 4 {
		t.Fatalf("%d pinned blocks, want 4", len(h.blocks))
	}
	n := 0
	for {
		x1, y1, ok1 := plain.Next()
		x2, y2, ok2 := pre.Next()
		if ok1 != ok2 {
			t.Fatalf("batch %d: ok %v and %v", n, ok1, ok2)
		}
		if !ok1 {
			break
		}
		if !slices.Equal(x1, x2) || !slices.Equal(y1, y2) {
			t.Fatalf("batch %d differs", n)
		}
		n++
	}
	// Each fill (7 batches and the end) waits for both of its blocks.
	if w := h.waits.Load(); w != 2*int64(n+1) {
		t.Fatalf("%d waits for %d fills", w, n+1)
	}
	if err := pre.Close(); err != nil || len(h.blocks) != 0 || pre.Err() != nil {
		t.Fatalf("Close: %v, %d blocks left, Err %v", err, len(h.blocks), pre.Err())
	}
}

// TestPrefetcherCloseMidEpoch: Close stops the filling goroutine before it
// frees the buffers, wherever the epoch is.
func TestPrefetcherCloseMidEpoch(t *testing.T) {
	ds := &Dataset{N: 64, Features: 2, X: make([]float32, 128), Y: make([]int32, 64)}
	h := &fakePinned{blocks: map[unsafe.Pointer][]byte{}}
	pre, err := NewPinnedPrefetcher(must(NewLoader(ds, 4, false, 0)), h)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := pre.Next(); !ok {
		t.Fatal("no batch")
	}
	if err := pre.Close(); err != nil || len(h.blocks) != 0 {
		t.Fatalf("Close: %v, %d blocks left", err, len(h.blocks))
	}
	if err := NewPrefetcher(must(NewLoader(ds, 4, false, 0))).Close(); err != nil {
		t.Fatal(err)
	}
}
