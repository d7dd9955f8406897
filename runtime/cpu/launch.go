package cpu

/*
#cgo CFLAGS: -I${SRCDIR}/emu
#include <stdlib.h>
#include "ngen_emu.h"

typedef int (*ngen_entry_fn)(int, const ngen_launch *);

// Go cannot call a C function pointer directly.
static int ngen_call_entry(void *entry, int kernel, const ngen_launch *l) {
	return ((ngen_entry_fn)entry)(kernel, l);
}

// ngen_free_pools frees the n workers' pools (ngen_pool_head) and the
// slots.
static void ngen_free_pools(ngen_pool_head **slots, long long n) {
	for (long long i = 0; i < n; i++)
		if (slots[i])
			slots[i]->destroy(slots[i]);
	free(slots);
}
*/
import "C"

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// maxBlockThreads is CUDA's limit, which the fiber pool is sized for.
const maxBlockThreads = 1024

// loaded is a module loaded on a Device.
type loaded struct {
	dev *Device
	mod *runtime.Module
}

// function is one kernel of a loaded module.
type function struct {
	mod   *loaded
	index int
	info  runtime.KernelInfo
	err   error // set when the index was out of range
}

func (f *function) Name() string { return f.info.Name }

// Load prepares a module whose kernels were compiled for the host, either
// into a generated package by cgo or by CompileModule.
func (d *Device) Load(m *runtime.Module) (runtime.Loaded, error) {
	if m == nil {
		return nil, fmt.Errorf("cpu: load of a nil module")
	}
	if d.gpuForms {
		g, err := gpuFormsModule(m)
		if err != nil {
			return nil, err
		}
		m = g
	}
	if m.CPUEntry == nil {
		return nil, fmt.Errorf("cpu: module %q has no CPUEntry: its package was built without cgo, or the module was not compiled for the host (see cpu.CompileModule)", m.Name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errClosed
	}
	return &loaded{dev: d, mod: m}, nil
}

// Function returns kernel i. An index out of range yields a Function whose
// launches fail, since the interface has no error to return here.
func (l *loaded) Function(i int) runtime.Function {
	if i < 0 || i >= len(l.mod.Kernels) {
		name := fmt.Sprintf("%s.kernel[%d]", l.mod.Name, i)
		return &function{mod: l, index: i, info: runtime.KernelInfo{Name: name},
			err: fmt.Errorf("cpu: module %q has %d kernels, no kernel %d", l.mod.Name, len(l.mod.Kernels), i)}
	}
	return &function{mod: l, index: i, info: l.mod.Kernels[i]}
}

// argKindNames are the Go types Launch accepts for each parameter kind.
var argKindNames = map[runtime.ArgKind]string{
	runtime.ArgPtr: "runtime.Ptr",
	runtime.ArgI32: "int32",
	runtime.ArgI64: "int64",
	runtime.ArgU64: "uint64",
	runtime.ArgF32: "float32",
	runtime.ArgF64: "float64",
}

// Launch runs f over grid×block threads and returns when all have finished.
func (d *Device) Launch(f runtime.Function, grid, block runtime.Dim3, sharedBytes int, args ...runtime.Arg) error {
	fn, ok := f.(*function)
	if !ok || fn == nil {
		return fmt.Errorf("cpu: launch of %T, which no CPU device loaded", f)
	}
	if fn.err != nil {
		return fn.err
	}
	if fn.mod.dev != d {
		return fmt.Errorf("cpu: launch %s: kernel was loaded on another device", fn.info.Name)
	}
	if err := checkShape(grid, block, sharedBytes); err != nil {
		return fmt.Errorf("cpu: launch %s: %v", fn.info.Name, err)
	}
	if d.gpuForms {
		if err := checkGPUShape(grid, sharedBytes); err != nil {
			return fmt.Errorf("cpu: launch %s: %v", fn.info.Name, err)
		}
	}
	params := fn.info.Params
	if len(args) != len(params) {
		return fmt.Errorf("cpu: launch %s: got %d args, want %d", fn.info.Name, len(args), len(params))
	}
	if fn.info.Steps > 0 && d.RunsWhole(&fn.info) {
		// The form this device runs did every step at launch 0 (a
		// caller that does not ask runtime.WholeLoops launches it once
		// a step, as for a GPU): the later launches have nothing to do.
		if i, ok := args[len(args)-1].(int32); ok && i != 0 {
			return nil
		}
	}

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	s := &d.launch
	if err := s.reserve(len(args)); err != nil {
		return fmt.Errorf("cpu: launch %s: %v", fn.info.Name, err)
	}
	for i, a := range args {
		if err := s.setArg(i, params[i], a); err != nil {
			return fmt.Errorf("cpu: launch %s: arg %d: %v", fn.info.Name, i, err)
		}
	}
	if fn.info.SoloBlocks && !d.gpuBlocks && (fn.info.Steps == 0 || d.RunsWhole(&fn.info)) {
		// (A stepped kernel's CUDA form, a step a launch, needs its block.)
		block = runtime.Dim3{X: 1, Y: 1, Z: 1}
	}
	status := s.run(fn.mod.mod.CPUEntry, fn.index, grid, block, sharedBytes, d.forms)
	if status != 0 {
		return fmt.Errorf("cpu: launch %s: %s", fn.info.Name, statusText(status, fn.info.Sync))
	}
	return nil
}

// RunsWhole reports whether the device runs a stepped kernel
// (runtime.KernelInfo.Steps) in a form that loops over every step in one
// launch (runtime.WholeLoops): the host form by default, the baseline form
// under Options.Baseline. Under Options.GPUBlocks and GPUForms it runs
// the CUDA form, a step a launch, as a GPU does.
func (d *Device) RunsWhole(k *runtime.KernelInfo) bool {
	switch d.forms {
	case C.NGEN_FORMS_HOST:
		return k.Host != nil
	case C.NGEN_FORMS_BASELINE:
		return k.Baseline != nil
	}
	return false
}

func checkShape(grid, block runtime.Dim3, sharedBytes int) error {
	for _, v := range []int{grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z} {
		if v < 1 || v > 1<<31-1 {
			return fmt.Errorf("grid %v block %v: every dimension must be in [1, 2^31)", grid, block)
		}
	}
	if n := block.Count(); n > maxBlockThreads {
		return fmt.Errorf("block %v has %d threads, more than %d", block, n, maxBlockThreads)
	}
	if sharedBytes < 0 || sharedBytes > 1<<31-1 {
		return fmt.Errorf("dynamic shared memory of %d bytes", sharedBytes)
	}
	return nil
}

// statusText explains a non-zero status from ngen_cpu_entry (see the enum
// in ngen_emu.h).
func statusText(status int, sync bool) string {
	switch status {
	case C.NGEN_ERR_DEADLOCK:
		return "deadlock: every live thread of a block waits on a barrier (__syncthreads, __syncwarp or a shuffle) that cannot complete"
	case C.NGEN_ERR_DIVERGENT_SYNC:
		return "deadlock in __syncthreads: threads of one block wait at different __syncthreads calls (divergent barrier)"
	case C.NGEN_ERR_LAUNCH:
		return "bad launch configuration, or no memory for fiber stacks or dynamic shared memory"
	case C.NGEN_ERR_SYNC_IN_SIMPLE:
		if !sync {
			return "kernel used __syncthreads or a warp shuffle but its KernelInfo.Sync is false"
		}
		return "kernel used __syncthreads or a warp shuffle but the entry runs it with NGEN_RUN_SIMPLE"
	case -1:
		return "ngen_cpu_entry has no case for this kernel index"
	}
	return fmt.Sprintf("ngen_cpu_entry returned status %d", status)
}

// launchState holds the C memory a launch is described in. It is guarded by
// Device.mu.
//
// A launch runs its shares on fresh goroutines, one cgo call each. That was
// measured against alternatives on a 2-core VM (2-block no-op launch):
// persistent workers locked to OS threads 54 µs, persistent unlocked workers
// 1.03 µs, a goroutine per share 0.96 µs. So the simplest one stays; the
// emulation's per-OS-thread fiber pools live on whichever threads Go's
// scheduler uses, which it keeps few (about GOMAXPROCS). The fiber pools
// (stacks, block state, dynamic shared memory) are the workers', one per
// share index, lent to every module the device runs (ngen_pool_head).
type launchState struct {
	workers int
	pools   **C.ngen_pool_head // one slot per worker, C memory

	// buf is C memory: nargs void* slots, then nargs 8-byte values, then
	// one ngen_launch per worker.
	buf   unsafe.Pointer
	nargs int
}

func (s *launchState) start(workers int) error {
	s.workers = workers
	if err := s.reserve(0); err != nil {
		return err
	}
	s.pools = (**C.ngen_pool_head)(C.calloc(C.size_t(max(workers, 1)), C.size_t(unsafe.Sizeof(uintptr(0)))))
	if s.pools == nil {
		s.stop()
		return fmt.Errorf("out of C memory for %d threads' fiber pools", workers)
	}
	return nil
}

func (s *launchState) stop() {
	C.free(s.buf)
	s.buf = nil
	if s.pools != nil {
		C.ngen_free_pools(s.pools, C.longlong(s.workers))
		s.pools = nil
	}
}

// poolAt is worker w's pool slot.
func (s *launchState) poolAt(w int) **C.ngen_pool_head {
	return (**C.ngen_pool_head)(unsafe.Add(unsafe.Pointer(s.pools), w*int(unsafe.Sizeof(uintptr(0)))))
}

// reserve makes room for n arguments. The size is computed with checked
// arithmetic: with 1<<61 workers, 16*n + workers*sizeof(ngen_launch)
// wrapped to a small positive size and the launches wrote past it.
func (s *launchState) reserve(n int) error {
	if s.buf != nil && n <= s.nargs {
		return nil
	}
	n = max(n, 16, 2*s.nargs)
	size, ok := launchBytes(n, s.workers, int(C.sizeof_ngen_launch))
	if !ok {
		return fmt.Errorf("%d launch arguments and %d threads: the launch description overflows", n, s.workers)
	}
	buf := C.malloc(C.size_t(size))
	if buf == nil {
		return fmt.Errorf("out of C memory for the %d-byte launch description (%d threads)", size, s.workers)
	}
	C.free(s.buf)
	s.buf, s.nargs = buf, n
	for i := range n {
		// args[i] points at value slot i, as cuLaunchKernel's kernelParams.
		*(*uintptr)(unsafe.Add(buf, 8*i)) = uintptr(buf) + uintptr(8*(n+i))
	}
	return nil
}

// launchBytes is 16·nargs + workers·launch, the size of a launch
// description, or false when it does not fit an int (or either count is
// negative).
func launchBytes(nargs, workers, launch int) (int, bool) {
	if nargs < 0 || workers < 0 || launch <= 0 || nargs > math.MaxInt/16 || workers > math.MaxInt/launch {
		return 0, false
	}
	a, b := 16*nargs, workers*launch
	if a > math.MaxInt-b {
		return 0, false
	}
	return a + b, true
}

func (s *launchState) launchAt(w int) *C.ngen_launch {
	return (*C.ngen_launch)(unsafe.Add(s.buf, 16*s.nargs+w*C.sizeof_ngen_launch))
}

// setArg checks arg i against its declared kind and stores its value.
func (s *launchState) setArg(i int, kind runtime.ArgKind, a runtime.Arg) error {
	slot := unsafe.Add(s.buf, 8*(s.nargs+i))
	ok := false
	switch v := a.(type) {
	case runtime.Ptr:
		if ok = kind == runtime.ArgPtr; ok {
			*(*uintptr)(slot) = uintptr(v)
		}
	case int32:
		if ok = kind == runtime.ArgI32; ok {
			*(*int32)(slot) = v
		}
	case int64:
		if ok = kind == runtime.ArgI64; ok {
			*(*int64)(slot) = v
		}
	case uint64:
		if ok = kind == runtime.ArgU64; ok {
			*(*uint64)(slot) = v
		}
	case float32:
		if ok = kind == runtime.ArgF32; ok {
			*(*float32)(slot) = v
		}
	case float64:
		if ok = kind == runtime.ArgF64; ok {
			*(*float64)(slot) = v
		}
	}
	if !ok {
		want, known := argKindNames[kind]
		if !known {
			return fmt.Errorf("unknown parameter kind %d", int(kind))
		}
		return fmt.Errorf("want %s, got %T", want, a)
	}
	return nil
}

// run splits the grid's blocks into one contiguous range per worker and
// returns the first non-zero status.
func (s *launchState) run(entry unsafe.Pointer, kernel int, grid, block runtime.Dim3, shared int, forms C.int) int {
	blocks := int64(grid.Count())
	parts := int(min(int64(s.workers), blocks))
	statuses := make([]int32, parts)
	var wg sync.WaitGroup
	for w := range parts {
		l := s.launchAt(w)
		l.grid = [3]C.uint{C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z)}
		l.block = [3]C.uint{C.uint(block.X), C.uint(block.Y), C.uint(block.Z)}
		l.shared_bytes = C.int(shared)
		l.args = (*unsafe.Pointer)(s.buf)
		l.block_begin = C.longlong(blocks * int64(w) / int64(parts))
		l.block_end = C.longlong(blocks * int64(w+1) / int64(parts))
		l.forms = forms
		l.pool = s.poolAt(w)
	}
	if parts == 1 {
		// A handoff to a worker costs more than a small kernel.
		return int(C.ngen_call_entry(entry, C.int(kernel), s.launchAt(0)))
	}
	wg.Add(parts - 1)
	for w := 1; w < parts; w++ {
		l := s.launchAt(w)
		go func() {
			statuses[w] = int32(C.ngen_call_entry(entry, C.int(kernel), l))
			wg.Done()
		}()
	}
	// The caller's thread takes the first share rather than idling.
	statuses[0] = int32(C.ngen_call_entry(entry, C.int(kernel), s.launchAt(0)))
	wg.Wait()
	for _, st := range statuses {
		if st != 0 {
			return int(st)
		}
	}
	return 0
}
