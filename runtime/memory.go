package runtime

import (
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Memory: the plan fixes every byte a session allocates before anything
// is allocated (one persistent block, one arena of temporaries, and with
// gradient accumulation one gradient-sized sum), so the memory a batch
// size needs, and the largest batch a budget allows, are arithmetic on the
// plan's symbolic sizes. Backends report what they hold (Device.MemStats)
// and refuse an allocation they cannot supply with an *OutOfMemoryError,
// after which the device and every session on it stay usable.

// OutOfMemoryError is what a backend's Alloc returns when it cannot
// supply the bytes (a CPU device's MemoryLimit, a GPU's memory). The
// session wraps it with what it was allocating; errors.As finds it.
type OutOfMemoryError struct {
	Device    string // the device's Name
	Requested int64  // bytes asked for
	Available int64  // bytes the device could still supply
	Allocated int64  // bytes the device has handed out
	Limit     int64  // the device's capacity or limit; 0 when unknown
}

func (e *OutOfMemoryError) Error() string {
	s := fmt.Sprintf("%s: out of memory: requested %d bytes (%s), %d bytes (%s) available; %d allocated",
		e.Device, e.Requested, HumanBytes(e.Requested), e.Available, HumanBytes(e.Available), e.Allocated)
	if e.Limit > 0 {
		s += fmt.Sprintf(" of %d", e.Limit)
	}
	return s
}

// IsOutOfMemory reports whether err is, or wraps, an out-of-memory error.
func IsOutOfMemory(err error) bool {
	var oom *OutOfMemoryError
	return errors.As(err, &oom)
}

// HumanBytes prints a byte count in KiB, MiB or GiB.
func HumanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
}

// PeakResetter is a device whose MemStats.Peak can be reset, like
// torch.cuda.reset_peak_memory_stats.
type PeakResetter interface{ ResetPeak() }

// MemoryInfo is a device that knows how many more bytes it can allocate:
// a CPU device under a MemoryLimit, a GPU (the driver's free memory plus
// the allocator's cache).
type MemoryInfo interface {
	// Available is the number of bytes Alloc can still supply, and ok
	// false when the device sets no bound.
	Available() (bytes int64, ok bool)
}

// AllocSizer is a device that rounds allocations up (a caching allocator's
// size classes); MaxBatch counts the rounded sizes.
type AllocSizer interface{ AllocSize(bytes int64) int64 }

// ResetPeak sets dev's peak to what is allocated now, when the backend
// supports it, and reports whether it did.
func ResetPeak(dev Device) bool {
	r, ok := dev.(PeakResetter)
	if ok {
		r.ResetPeak()
	}
	return ok
}

// layout places a plan's buffers for the symbol bindings env: persistent
// buffers back to back, each function's temporaries in one arena that all
// functions share. Sessions allocate by it and MaxBatch counts by it.
type layout struct {
	offs     []int64 // persistent buffer → offset in the persistent block
	persist  int64
	arenaOff []int64 // arena buffer → offset in the arena
	arena    int64
}

func planLayout(p *Plan, env map[string]int) layout {
	l := layout{offs: make([]int64, len(p.Buffers)), arenaOff: make([]int64, len(p.Buffers))}
	for i := range p.Buffers {
		b := &p.Buffers[i]
		if b.Placement == Persistent {
			l.offs[i] = l.persist
			l.persist += alignUp(b.Elems.Eval(env) * int64(b.DType.Size()))
		}
	}
	// Each function's temporaries are planned separately because
	// functions never overlap in time.
	for f := range p.Funcs {
		var idx []int
		var sizes []int64
		var live [][2]int
		for i := range p.Buffers {
			b := &p.Buffers[i]
			if b.Placement == Arena && b.Func == f {
				idx = append(idx, i)
				sizes = append(sizes, b.Elems.Eval(env)*int64(b.DType.Size()))
				live = append(live, b.Live)
			}
		}
		o, total := PlanArena(sizes, live)
		for k, i := range idx {
			l.arenaOff[i] = o[k]
		}
		l.arena = max(l.arena, total)
	}
	return l
}

// SessionAllocs lists the sizes of the allocations NewSession makes for
// plan p with opt, in order: the persistent block, the arena, and, when
// opt.AccumulationSteps > 1, the gradient sum.
func SessionAllocs(p *Plan, opt SessionOptions) []int64 {
	env := map[string]int{}
	for _, y := range p.Symbols {
		env[y] = opt.Symbols[y]
	}
	env["B"] = opt.MaxBatch
	if checkSizes(p, env) != nil {
		// Sizes that overflow fit no device.
		return []int64{math.MaxInt64}
	}
	l := planLayout(p, env)
	out := []int64{l.persist, l.arena}
	if opt.AccumulationSteps > 1 {
		for _, b := range p.Buffers {
			if b.Role == "grads" {
				out = append(out, alignUp(b.Elems.Eval(env)*int64(b.DType.Size()))+Align)
			}
		}
	}
	return out
}

// SessionBytes is the device memory NewSession takes for plan p with opt,
// counting dev's allocation rounding when it has one (dev may be nil).
func SessionBytes(dev Device, p *Plan, opt SessionOptions) int64 {
	var n int64
	sz, _ := dev.(AllocSizer)
	for _, a := range SessionAllocs(p, opt) {
		if sz != nil && a > 0 && a < math.MaxInt64 {
			a = sz.AllocSize(a)
		}
		if a < 0 || n > math.MaxInt64-a {
			return math.MaxInt64 // saturate: nothing that large fits
		}
		n += a
	}
	return n
}

// MaxBatch is the largest batch size whose session (opt with MaxBatch set
// to it) fits in budget bytes, computed from the plan's sizes without
// allocating anything. budget <= 0 means what dev can still supply (a
// MemoryInfo device). It returns an *OutOfMemoryError when not even a
// batch of one fits.
func MaxBatch(dev Device, p *Plan, budget int64, opt SessionOptions) (int, error) {
	if dev == nil {
		return 0, fmt.Errorf("%s: MaxBatch: the device is nil", p.Model)
	}
	for _, y := range p.Symbols {
		if y != "B" && opt.Symbols[y] <= 0 {
			return 0, fmt.Errorf("%s: MaxBatch: no bound given for symbol %s", p.Model, y)
		}
	}
	if budget <= 0 {
		mi, ok := dev.(MemoryInfo)
		var avail int64
		if ok {
			avail, ok = mi.Available()
		}
		if !ok {
			return 0, fmt.Errorf("%s: MaxBatch: no budget given and device %s sets no memory bound", p.Model, dev.Name())
		}
		budget = avail
	}
	need := func(b int) int64 {
		o := opt
		o.MaxBatch = b
		return SessionBytes(dev, p, o)
	}
	if n := need(1); n > budget {
		return 0, &OutOfMemoryError{Device: dev.Name(), Requested: n, Available: budget}
	}
	// The sizes grow with the batch: double, then bisect.
	lo, hi := 1, 2
	for need(hi) <= budget {
		lo, hi = hi, hi*2
		if hi > 1<<30 {
			return lo, nil
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if need(mid) <= budget {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// MemoryBytes is the device memory this session holds.
func (s *Session) MemoryBytes() int64 {
	o := SessionOptions{MaxBatch: s.maxEnv["B"], Symbols: s.maxEnv}
	if s.acc.sum != 0 {
		o.AccumulationSteps = 2
	}
	var n int64
	for _, a := range SessionAllocs(s.plan, o) {
		n += a
	}
	return n
}

// HostAllocator is a device with page-locked host memory, from which its
// copies to the device run asynchronously, as PyTorch's pin_memory=True
// buffers: data.Prefetcher fills its batch buffers there.
type HostAllocator interface {
	AllocHost(bytes int64) (unsafe.Pointer, error)
	FreeHost(p unsafe.Pointer) error
	// WaitHost returns once no queued copy still reads the block holding
	// p, so the host may overwrite it.
	WaitHost(p unsafe.Pointer) error
}
