//go:build cuda

// Package cuda is the GPU backend of the ngen runtime: it implements
// runtime.Device on an NVIDIA GPU through the CUDA driver API, using
// gorgonia.org/cu (and cu/blas, cu/nvrtc). It is the only package in ngen
// that imports gorgonia.org/cu, and it builds only with the cuda tag.
//
// Pipeline: DSL → IR → passes → kernels → glue → runtime. The generated .cu
// reaches this package as a runtime.Module: a fatbin or PTX built by nvcc at
// generation time, or the source, which Load compiles with NVRTC for the
// device at hand.
//
// A CUDA context belongs to the OS thread it is current on, so each Device
// owns one goroutine locked to one OS thread, and every driver, cuBLAS and
// allocator call runs on it (see do). Work is ordered on one stream;
// cuBLAS runs on it too, through the shim (shim.go), which also adds
// strided-batched GEMMs and CUDA graphs (graph.go).
//
// gorgonia.org/cu exits the process from its package init when cuInit fails;
// initguard.c keeps it alive, and Available and New report the reason
// instead. See docs/GPU.md.
package cuda

import (
	"errors"
	"fmt"
	goruntime "runtime"
	"sync"

	"gorgonia.org/cu"

	"github.com/ngen-ml/ngen/runtime"
)

// Options configures a GPU device.
type Options struct {
	// Ordinal is the CUDA device number, as in CUDA_VISIBLE_DEVICES order.
	Ordinal int
	// NoGraphs turns CUDA graphs off: every step issues its kernels,
	// GEMMs and memsets one by one instead of replaying the graph captured
	// from the first step at its batch size (graph.go). Graphs are on by
	// default; a fault inside a graph cannot name its kernel, so turn them
	// off to find one. OpenDevice("cuda") reads NGEN_CUDA_GRAPHS=0.
	NoGraphs bool
	// TF32 lets cuBLAS run f32 GEMMs on TF32 tensor cores
	// (CUBLAS_TF32_TENSOR_OP_MATH): several times the FP32 peak on A100 and
	// H100, with a 10-bit mantissa in the products, as torch's
	// allow_tf32. Off by default. OpenDevice("cuda") reads NGEN_CUDA_TF32=1.
	TF32 bool
}

// Device is one CUDA context on one GPU with one stream. Its methods are
// safe for concurrent use; they are serialised onto the device's thread.
type Device struct {
	info Info

	mu     sync.Mutex // held for a whole call into the device thread
	closed bool
	work   chan func() error
	result chan error

	// Owned by the device thread; read under mu.
	ctx        cu.CUContext
	stream     cu.Stream
	opts       Options
	sblas      *blasHandle // cuBLAS on stream, through the shim
	scratch    gemmScratch // for summed GEMMs (gemm_calls.go)
	gr         graphState  // CUDA graphs (graph.go)
	mem        allocator
	stage      staging
	host       hostBlocks // pinned memory from AllocHost (pinned_host.go)
	cs         copyStream // the copy stream (copy_stream.go)
	lastKernel string     // for errors that surface at Sync
	timer      timer      // CUDA-event timing of launches and GEMMs (timing.go)
}

var _ runtime.Device = (*Device)(nil)

var errClosed = errors.New("cuda: device is closed")

// New creates a context on device opts.Ordinal, bound to a new locked OS
// thread. Without a usable device the error wraps ErrNoDevice.
func New(opts Options) (*Device, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	infos, err := Devices()
	if err != nil {
		return nil, err
	}
	if opts.Ordinal < 0 || opts.Ordinal >= len(infos) {
		return nil, fmt.Errorf("cuda: device %d does not exist; there are %d", opts.Ordinal, len(infos))
	}
	d := &Device{info: infos[opts.Ordinal], opts: opts, work: make(chan func() error), result: make(chan error)}
	d.gr.off = opts.NoGraphs
	ready := make(chan error)
	go d.serve(ready)
	if err := <-ready; err != nil {
		return nil, fmt.Errorf("cuda: device %d: %v", opts.Ordinal, err)
	}
	return d, nil
}

// serve is the device thread. The context is created on it and never made
// current anywhere else; the thread is never unlocked, so it exits with the
// goroutine and no other goroutine inherits the context.
func (d *Device) serve(ready chan<- error) {
	goruntime.LockOSThread()
	if err := d.open(); err != nil {
		d.release()
		ready <- err
		return
	}
	close(ready)
	for f := range d.work {
		d.result <- call(f)
	}
}

func (d *Device) open() error {
	dev, err := cu.GetDevice(d.info.Ordinal)
	if err != nil {
		return fmt.Errorf("cuDeviceGet: %v", err)
	}
	if d.ctx, err = dev.MakeContext(cu.SchedAuto); err != nil {
		return fmt.Errorf("cuCtxCreate: %v", err)
	}
	if d.stream, err = cu.MakeStream(cu.DefaultStream); err != nil {
		return fmt.Errorf("cuStreamCreate: %v", err)
	}
	if d.sblas, err = newBLAS(d.stream, d.opts.TF32); err != nil {
		return err
	}
	d.mem.init(d)
	return d.stage.init()
}

// release frees everything open made, on the device thread.
func (d *Device) release() error {
	var errs []error
	if d.ctx == (cu.CUContext{}) {
		return nil
	}
	if d.stream != (cu.Stream{}) {
		errs = append(errs, d.stream.Synchronize())
	}
	errs = append(errs, d.gr.drop(), d.cs.release())
	d.scratch.release(&d.mem)
	d.stage.release()
	d.host.release()
	errs = append(errs, d.timer.release())
	d.mem.releaseAll()
	if d.sblas != nil {
		errs = append(errs, d.sblas.close())
		d.sblas = nil
	}
	if d.stream != (cu.Stream{}) {
		errs = append(errs, d.stream.Destroy())
	}
	errs = append(errs, d.ctx.Destroy())
	return errors.Join(errs...)
}

// call runs f, turning a panic (cu/blas panics on arguments it rejects)
// into an error so that the device thread survives it.
func call(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("cuda: panic on the device thread: %v", p)
		}
	}()
	return f()
}

// do runs f on the device thread and returns its error.
func (d *Device) do(f func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	// A call that cannot join a CUDA graph ends the recording first,
	// issuing what was recorded (graph.go).
	d.work <- func() error {
		if err := d.gr.abandon(d); err != nil {
			return err
		}
		return f()
	}
	return <-d.result
}

// Name describes the device, e.g. "cuda:0 NVIDIA H100 80GB HBM3 (sm_90, ...)".
func (d *Device) Name() string { return d.info.String() }

// Info returns what Devices reported for this device.
func (d *Device) Info() Info { return d.info }

// Sync waits for all work on the stream. Kernel faults surface here, so the
// error names the last kernel launched.
func (d *Device) Sync() error {
	return d.do(func() error {
		if err := d.stream.Synchronize(); err != nil {
			if d.lastKernel != "" {
				return fmt.Errorf("cuda: sync: %v (last kernel launched: %s)", err, d.lastKernel)
			}
			return fmt.Errorf("cuda: sync: %v", err)
		}
		return nil
	})
}

// MemStats reports memory from Alloc (Allocated, Peak: bytes requested) and
// memory held from the driver including the allocator's cache (Reserved).
func (d *Device) MemStats() runtime.MemStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.mem.stats
}

// Close waits for the stream, frees all device memory and destroys the
// context. Pointers from this device must not be used afterwards.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.work <- d.release
	err := <-d.result
	d.closed = true
	close(d.work)
	if err != nil {
		return fmt.Errorf("cuda: close: %v", err)
	}
	return nil
}
