//go:build cuda

package cuda

import (
	"errors"
	"fmt"

	"gorgonia.org/cu"

	"github.com/ngen-ml/ngen/runtime"
)

// allocator caches device memory by size class, like PyTorch's caching
// allocator: cuMemAlloc and cuMemFree synchronise the device, so a plan that
// allocates its arena once per step must not pay for them every step.
//
// A freed block goes back to its class's free list at once. Reusing it
// before the kernels that used it have run is safe because everything is
// ordered on the one stream. Blocks return to the driver only on Close,
// EmptyCache, or when an allocation fails and the cache might cover it.
//
// It runs on the device thread; stats is also read under Device.mu.
type allocator struct {
	dev   *Device
	live  map[runtime.Ptr]block
	free  map[int64][]cu.DevicePtr // by class size
	stats runtime.MemStats
}

// block is one live allocation: what Alloc was asked for and the class size
// actually held.
type block struct{ requested, size int64 }

const (
	smallLimit = 1 << 20 // blocks up to here are rounded to smallRound
	smallRound = 512     // cuMemAlloc's alignment, and PyTorch's small rounding
	largeRound = 2 << 20 // large blocks (plan arenas) round to 2 MiB
)

// sizeClass is the block size that serves a request of n bytes.
func sizeClass(n int64) int64 {
	round := int64(smallRound)
	if n > smallLimit {
		round = largeRound
	}
	return (n + round - 1) / round * round
}

func (a *allocator) init(d *Device) {
	a.dev = d
	a.live = make(map[runtime.Ptr]block)
	a.free = make(map[int64][]cu.DevicePtr)
}

// OutOfMemoryError is the error Alloc returns when the device cannot supply
// a block even after the cache was given back. The device stays usable.
type OutOfMemoryError struct {
	Requested int64 // bytes asked for
	Free      int64 // bytes the driver reports free
	Total     int64 // device memory
	Allocated int64 // bytes this Device has handed out
	Reserved  int64 // bytes this Device holds, including its cache
}

func (e *OutOfMemoryError) Error() string {
	return fmt.Sprintf("cuda: out of memory: requested %d bytes (%s), %d bytes free of %d on the device; this device has %d bytes allocated, %d reserved",
		e.Requested, human(e.Requested), e.Free, e.Total, e.Allocated, e.Reserved)
}

func human(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
}

func (a *allocator) alloc(bytes int64) (runtime.Ptr, error) {
	size := sizeClass(bytes)
	var p cu.DevicePtr
	if list := a.free[size]; len(list) > 0 {
		p = list[len(list)-1]
		a.free[size] = list[:len(list)-1]
	} else {
		var err error
		p, err = cu.MemAlloc(size)
		if errors.Is(err, cu.OutOfMemory) && a.cached() > 0 {
			if err = a.releaseCache(); err == nil {
				p, err = cu.MemAlloc(size)
			}
		}
		if errors.Is(err, cu.OutOfMemory) {
			free, total, _ := cu.MemInfo()
			return 0, &OutOfMemoryError{Requested: bytes, Free: free, Total: total,
				Allocated: a.stats.Allocated, Reserved: a.stats.Reserved}
		}
		if err != nil {
			return 0, fmt.Errorf("cuda: cuMemAlloc(%d): %v", size, err)
		}
		a.stats.Reserved += size
	}
	a.live[runtime.Ptr(p)] = block{requested: bytes, size: size}
	a.stats.Allocated += bytes
	a.stats.Peak = max(a.stats.Peak, a.stats.Allocated)
	return runtime.Ptr(p), nil
}

func (a *allocator) release(p runtime.Ptr) error {
	b, ok := a.live[p]
	if !ok {
		return fmt.Errorf("cuda: free of %#x, which Alloc did not return or was already freed", uintptr(p))
	}
	delete(a.live, p)
	a.free[b.size] = append(a.free[b.size], cu.DevicePtr(p))
	a.stats.Allocated -= b.requested
	return nil
}

// cached is the number of bytes held in free lists.
func (a *allocator) cached() int64 {
	var n int64
	for size, list := range a.free {
		n += size * int64(len(list))
	}
	return n
}

// releaseCache gives every cached block back to the driver. The stream is
// synchronised first, so no queued kernel still uses one.
func (a *allocator) releaseCache() error {
	if err := a.dev.stream.Synchronize(); err != nil {
		return fmt.Errorf("cuda: sync before releasing cached memory: %v", err)
	}
	var errs []error
	for size, list := range a.free {
		for _, p := range list {
			errs = append(errs, cu.MemFree(p))
			a.stats.Reserved -= size
		}
	}
	clear(a.free)
	return errors.Join(errs...)
}

// releaseAll frees cached and live blocks, for Close.
func (a *allocator) releaseAll() {
	if a.live == nil {
		return
	}
	for p, b := range a.live {
		a.free[b.size] = append(a.free[b.size], cu.DevicePtr(p))
	}
	clear(a.live)
	a.releaseCache()
	a.stats.Allocated, a.stats.Reserved = 0, 0
}

// Alloc returns device memory, aligned to at least 256 bytes, from the
// cache when a freed block of the same size class is there. Alloc(0)
// returns the null pointer. When the device is out of memory the error is an
// *OutOfMemoryError and the device stays usable.
func (d *Device) Alloc(bytes int64) (runtime.Ptr, error) {
	if bytes < 0 {
		return 0, fmt.Errorf("cuda: alloc of %d bytes", bytes)
	}
	var p runtime.Ptr
	err := d.do(func() error {
		if bytes == 0 {
			return nil
		}
		var err error
		p, err = d.mem.alloc(bytes)
		return err
	})
	return p, err
}

// Free returns memory from Alloc to the cache. Freeing the null pointer does
// nothing.
func (d *Device) Free(p runtime.Ptr) error {
	if p == 0 {
		return nil
	}
	return d.do(func() error {
		// A CUDA graph may hold p (graph.go).
		if err := d.gr.drop(); err != nil {
			return err
		}
		return d.mem.release(p)
	})
}

// EmptyCache gives the allocator's cached blocks back to the driver, like
// torch.cuda.empty_cache. Memory still allocated is untouched.
func (d *Device) EmptyCache() error {
	return d.do(d.mem.releaseCache)
}
