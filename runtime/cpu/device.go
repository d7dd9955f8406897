// Package cpu is the CPU backend of the ngen runtime: it implements
// runtime.Device by running the generated CUDA C itself on the host.
//
// Pipeline: DSL → IR → passes → kernels → glue → runtime. The generated .cu is
// compiled by the host C++ compiler against emu/ngen_emu.h (which emulates
// threadIdx, __syncthreads, warp shuffles and atomics), together with an
// entry function int ngen_cpu_entry(int kernel, const ngen_launch *l) that
// runs a range of a kernel's blocks. Device memory is C heap memory, so
// kernels get raw host pointers; GEMMs go to oneDNN (f32) and OpenBLAS (f64).
//
// A launch splits the grid's blocks into one contiguous range per thread
// (Options.Threads), each run by one cgo call. Within a block, kernels
// without barriers run as a plain loop over threads; kernels that use
// __syncthreads or warp shuffles (KernelInfo.Sync) run each thread as a
// fiber. Kernels that give the same values with one-thread blocks
// (KernelInfo.SoloBlocks: the reductions) are launched so, unless
// Options.GPUBlocks is set.
//
// Generated packages build the entry into themselves with cgo; tests and
// tools can compile kernels at run time with CompileModule.
//
// Options.GPUForms is a test mode that runs the kernels as a GPU runs them
// (the preamble's grid-stride loops and warp shuffles as written, every
// thread of every block): Load recompiles the module's CUDA source for it
// (gpuforms.go).
package cpu

/*
#cgo CFLAGS: -I${SRCDIR}/emu
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "ngen_emu.h"
#include <sys/mman.h>

// Blocks from 64 KiB on are mapped directly and unmapped when freed, so
// their pages go back to the system at once. Through malloc, each free of
// a large block raised glibc's dynamic mmap threshold, later blocks came
// from its per-thread arenas, and a process that rebuilt a model every
// 500 steps grew by the model's size each time (runtime's TestSoakMLP).
// A session allocates a handful of blocks, so a page's rounding is noise.
#define NGEN_MAP_MIN ((size_t)1 << 16)

//
// Every block has NGEN_ALLOC_SLACK bytes more than asked: the emulation
// reads a 16-bit element at a computed index as the 32-bit word at its
// offset (ngen_half.h's ngen_ld16), 2 bytes past the last element.
#define NGEN_ALLOC_SLACK 4

static uintptr_t ngen_alloc(size_t bytes) {
	bytes += NGEN_ALLOC_SLACK;
	if (bytes >= NGEN_MAP_MIN) {
		void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		return p == MAP_FAILED ? 0 : (uintptr_t)p; // page-aligned
	}
	// aligned_alloc wants a multiple of the alignment.
	return (uintptr_t)aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}
static void ngen_free(uintptr_t p, size_t bytes) {
	bytes += NGEN_ALLOC_SLACK;
	if (bytes >= NGEN_MAP_MIN) {
		munmap((void *)p, bytes);
		return;
	}
	free((void *)p);
}
static void ngen_memset(uintptr_t p, int v, size_t n) { memset((void *)p, v, n); }
static void ngen_copy(uintptr_t dst, uintptr_t src, size_t n) { memmove((void *)dst, (void *)src, n); }
static void ngen_to_device(uintptr_t dst, const void *src, size_t n) { memcpy((void *)dst, src, n); }
static void ngen_to_host(void *dst, uintptr_t src, size_t n) { memcpy(dst, (const void *)src, n); }
*/
import "C"

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// MaxThreads bounds Options.Threads (and OpenDevice's thread count): a
// launch runs a goroutine and a cgo call per thread and describes each in
// C memory, so an absurd count (1<<60 from a typo or an overflow) must be
// an error, not a failed C malloc or a size that wraps. It is far above
// any core count a launch could use.
const MaxThreads = 4096

// Options configures a CPU device.
type Options struct {
	// Threads is how many OS threads run blocks in parallel, and how many
	// share each Gemm. 0 means runtime.NumCPU().
	Threads int
	// GPUBlocks launches every kernel with the block its launch asks for,
	// as a GPU would. By default, kernels marked KernelInfo.SoloBlocks
	// (the reductions) run with one-thread blocks, several times faster
	// here; tests set GPUBlocks to run the GPU's launch shapes too.
	GPUBlocks bool
	// GPUForms runs the kernels in the form a GPU runs them: Load compiles
	// the module's CUDA source with the preamble's grid-stride loops and
	// warp shuffles as written, every launch runs grid × block threads
	// with the block it asks for, and a launch a GPU would reject fails.
	// A test mode, many times slower; it needs a C++ compiler at run time
	// (gpuforms.go).
	GPUForms bool
	// Baseline runs, where a kernel has one (runtime.KernelInfo.Baseline),
	// its baseline form in place of its host form: the recurrences'
	// tiled form, attention's GPU form, whose arithmetic is the CUDA
	// form's (the host forms change the order of sums and contract
	// products into FMAs where the host has them). Tests set it to compare
	// with the GPU forms bit for bit on any host.
	Baseline bool
	// MemoryLimit caps the bytes Alloc hands out at once, as a GPU's memory
	// does (0: no cap): an allocation past it fails with a
	// *runtime.OutOfMemoryError, so that running out of memory can be
	// tested on the CPU.
	MemoryLimit int64
}

// Device runs kernels on the host. Its methods are safe for concurrent use;
// launches are serialised, as on a single CUDA stream.
type Device struct {
	threads   int
	gpuBlocks bool
	gpuForms  bool
	forms     C.int // ngen_launch.forms for every launch
	limit     int64

	mu     sync.Mutex // guards everything below
	closed bool
	allocs map[runtime.Ptr]int64
	stats  runtime.MemStats
	launch launchState
}

var _ runtime.Device = (*Device)(nil)

// errClosed is returned by every call after Close.
var errClosed = errors.New("cpu: device is closed")

// New returns a CPU device. It also sets OpenBLAS's thread count, which is
// process-wide, to one: the device splits GEMMs between its own threads.
func New(opts Options) (*Device, error) {
	if opts.Threads < 0 || opts.Threads > MaxThreads {
		return nil, fmt.Errorf("cpu: Options.Threads = %d, want 0 (every core) to %d", opts.Threads, MaxThreads)
	}
	if opts.MemoryLimit < 0 {
		return nil, fmt.Errorf("cpu: Options.MemoryLimit = %d, want >= 0", opts.MemoryLimit)
	}
	n := opts.Threads
	if n == 0 {
		n = goruntime.NumCPU()
	}
	d := &Device{threads: n, gpuBlocks: opts.GPUBlocks || opts.GPUForms, gpuForms: opts.GPUForms, limit: opts.MemoryLimit, allocs: make(map[runtime.Ptr]int64)}
	switch {
	case d.gpuBlocks:
		d.forms = C.NGEN_FORMS_CUDA
	case opts.Baseline:
		d.forms = C.NGEN_FORMS_BASELINE
	default:
		d.forms = C.NGEN_FORMS_HOST
	}
	if err := d.launch.start(n); err != nil {
		return nil, err
	}
	setBLASThreads(1) // the device shares GEMMs between its own threads (gemm.go)
	return d, nil
}

// Name describes the device.
func (d *Device) Name() string {
	if d.gpuForms {
		return fmt.Sprintf("cpu (%d threads, GPU forms)", d.threads)
	}
	return fmt.Sprintf("cpu (%d threads)", d.threads)
}

// Alloc returns 64-byte-aligned C memory, so kernels can vectorise and Go's
// collector never moves or scans it; blocks of 64 KiB or more are mapped
// pages, returned to the system by Free. Alloc(0) returns the null pointer.
func (d *Device) Alloc(bytes int64) (runtime.Ptr, error) {
	if bytes < 0 {
		return 0, fmt.Errorf("cpu: alloc of %d bytes", bytes)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, errClosed
	}
	if bytes == 0 {
		return 0, nil
	}
	if d.limit > 0 && bytes > d.limit-d.stats.Allocated {
		return 0, d.oom(bytes, d.limit-d.stats.Allocated)
	}
	p := runtime.Ptr(C.ngen_alloc(C.size_t(bytes)))
	if p == 0 {
		return 0, d.oom(bytes, 0)
	}
	d.allocs[p] = bytes
	d.stats.Allocated += bytes
	d.stats.Reserved = d.stats.Allocated
	d.stats.Peak = max(d.stats.Peak, d.stats.Allocated)
	return p, nil
}

// Free releases memory from Alloc. Freeing the null pointer does nothing.
func (d *Device) Free(p runtime.Ptr) error {
	if p == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	n, ok := d.allocs[p]
	if !ok {
		return fmt.Errorf("cpu: free of %#x, which Alloc did not return or was already freed", uintptr(p))
	}
	delete(d.allocs, p)
	C.ngen_free(C.uintptr_t(p), C.size_t(n))
	d.stats.Allocated -= n
	d.stats.Reserved = d.stats.Allocated
	return nil
}

// checkRange rejects negative sizes and null pointers; bytes == 0 is a no-op
// for which checkRange reports false.
func (d *Device) checkRange(op string, bytes int64, ptrs ...uintptr) (bool, error) {
	if bytes < 0 {
		return false, fmt.Errorf("cpu: %s of %d bytes", op, bytes)
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return false, errClosed
	}
	if bytes == 0 {
		return false, nil
	}
	for _, p := range ptrs {
		if p == 0 {
			return false, fmt.Errorf("cpu: %s of %d bytes through a null pointer", op, bytes)
		}
	}
	return true, nil
}

// Memset sets bytes bytes at p to value.
func (d *Device) Memset(p runtime.Ptr, value byte, bytes int64) error {
	ok, err := d.checkRange("memset", bytes, uintptr(p))
	if ok {
		C.ngen_memset(C.uintptr_t(p), C.int(value), C.size_t(bytes))
	}
	return err
}

// CopyToDevice copies bytes bytes from host memory at src to dst.
func (d *Device) CopyToDevice(dst runtime.Ptr, src unsafe.Pointer, bytes int64) error {
	ok, err := d.checkRange("copy to device", bytes, uintptr(dst), uintptr(src))
	if ok {
		C.ngen_to_device(C.uintptr_t(dst), src, C.size_t(bytes))
	}
	return err
}

// CopyToHost copies bytes bytes from src to host memory at dst.
func (d *Device) CopyToHost(dst unsafe.Pointer, src runtime.Ptr, bytes int64) error {
	ok, err := d.checkRange("copy to host", bytes, uintptr(dst), uintptr(src))
	if ok {
		C.ngen_to_host(dst, C.uintptr_t(src), C.size_t(bytes))
	}
	return err
}

// CopyDevice copies bytes bytes from src to dst; the ranges may overlap.
func (d *Device) CopyDevice(dst, src runtime.Ptr, bytes int64) error {
	ok, err := d.checkRange("device copy", bytes, uintptr(dst), uintptr(src))
	if ok {
		C.ngen_copy(C.uintptr_t(dst), C.uintptr_t(src), C.size_t(bytes))
	}
	return err
}

// Sync returns at once: every call finishes before it returns.
func (d *Device) Sync() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	return nil
}

// MemStats reports memory from Alloc. Nothing is cached, so Reserved equals
// Allocated.
func (d *Device) MemStats() runtime.MemStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

func (d *Device) oom(bytes, avail int64) error {
	return &runtime.OutOfMemoryError{Device: d.Name(), Requested: bytes, Available: avail, Allocated: d.stats.Allocated, Limit: d.limit}
}

// Available is what Alloc can still hand out under MemoryLimit; with no
// limit the device sets no bound (ok false).
func (d *Device) Available() (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.limit == 0 {
		return 0, false
	}
	return d.limit - d.stats.Allocated, true
}

// ResetPeak sets the peak to what is allocated now, like
// torch.cuda.reset_peak_memory_stats.
func (d *Device) ResetPeak() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats.Peak = d.stats.Allocated
}

// Close frees all memory from Alloc. Pointers from this device must not be
// used afterwards.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	for p, n := range d.allocs {
		C.ngen_free(C.uintptr_t(p), C.size_t(n))
	}
	clear(d.allocs)
	d.stats.Allocated, d.stats.Reserved = 0, 0
	d.launch.stop()
	return nil
}
