//go:build cuda

package cuda

import (
	"gorgonia.org/cu"

	"github.com/ngen-ml/ngen/runtime"
)

// The runtime's memory interfaces (runtime/memory.go) on the GPU: real
// device memory, reported the way the CPU backend reports its
// MemoryLimit, so MaxBatch and out-of-memory handling work the same.

// As lets errors.As find a *runtime.OutOfMemoryError in this backend's
// error: Available is the driver's free memory (the cache was already
// given back before the allocation failed).
func (e *OutOfMemoryError) As(target any) bool {
	t, ok := target.(**runtime.OutOfMemoryError)
	if ok {
		*t = &runtime.OutOfMemoryError{Device: "cuda", Requested: e.Requested, Available: e.Free, Allocated: e.Allocated, Limit: e.Total}
	}
	return ok
}

// Available is the driver's free memory plus the allocator's cache, which
// an allocation gives back before it fails.
func (d *Device) Available() (int64, bool) {
	var n int64
	err := d.do(func() error {
		free, _, err := cu.MemInfo()
		n = free + d.mem.cached()
		return err
	})
	return n, err == nil
}

// ResetPeak sets the peak to what is allocated now, like
// torch.cuda.reset_peak_memory_stats.
func (d *Device) ResetPeak() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mem.stats.Peak = d.mem.stats.Allocated
}

// AllocSize is the size class an allocation of n bytes takes.
func (d *Device) AllocSize(n int64) int64 { return sizeClass(n) }

var (
	_ runtime.MemoryInfo   = (*Device)(nil)
	_ runtime.PeakResetter = (*Device)(nil)
	_ runtime.AllocSizer   = (*Device)(nil)
)
