package runtime_test

import (
	"testing"
	"unsafe"

	"github.com/ngen-ml/ngen/generated/gpt"
	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
)

// idleDevice does no device work: every launch, GEMM and copy to the
// device returns at once, and reads give zeros (a clean status block).
// A step on it is the host's part of a step alone, what a GPU that
// finishes every kernel instantly would leave (issue 26: steps bound by
// the host).
type idleDevice struct{ next runtime.Ptr }

type idleFn struct{}

func (idleFn) Name() string { return "idle" }

type idleLoaded struct{}

func (idleLoaded) Function(int) runtime.Function { return idleFn{} }

func (d *idleDevice) Name() string                                          { return "idle" }
func (d *idleDevice) Load(*runtime.Module) (runtime.Loaded, error)          { return idleLoaded{}, nil }
func (d *idleDevice) Free(runtime.Ptr) error                                { return nil }
func (d *idleDevice) Memset(runtime.Ptr, byte, int64) error                 { return nil }
func (d *idleDevice) CopyToDevice(runtime.Ptr, unsafe.Pointer, int64) error { return nil }
func (d *idleDevice) CopyDevice(runtime.Ptr, runtime.Ptr, int64) error      { return nil }
func (d *idleDevice) Gemm(runtime.GemmArgs) error                           { return nil }
func (d *idleDevice) Sync() error                                           { return nil }
func (d *idleDevice) MemStats() runtime.MemStats                            { return runtime.MemStats{} }
func (d *idleDevice) Close() error                                          { return nil }
func (d *idleDevice) Launch(runtime.Function, runtime.Dim3, runtime.Dim3, int, ...runtime.Arg) error {
	return nil
}

func (d *idleDevice) Alloc(n int64) (runtime.Ptr, error) {
	d.next += 1 << 12
	p := d.next
	d.next += runtime.Ptr(n)
	return p, nil
}

func (d *idleDevice) CopyToHost(dst unsafe.Pointer, _ runtime.Ptr, n int64) error {
	clear(unsafe.Slice((*byte)(dst), n))
	return nil
}

// stepAllocs is the allocations of one training step of the host's
// part, after warm-up.
func stepAllocs(t testing.TB, step func() error) float64 {
	for range 3 {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return testing.AllocsPerRun(50, func() {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestHostStepAllocs holds the host's part of a training step to a few
// allocations (issue 26: no allocation per step on the hot path). It was
// 235 with the CPU backend's own, about 120 of them the session's: the
// optimizer's group rules made afresh at each of the update bound's ~64
// probes, a launch's argument slice and each buffer pointer boxed into
// an Arg per launch, the status block and the update's scalar map per
// step. Those are made once now; since the device clock (clock.go) no
// launch argument changes from step to step (12 allocations a step
// before it), and the session boxes each scalar argument once (box),
// and WriteInput's any does not escape, so a caller's slice boxed into
// it stays on the stack: none is left, and any new per-step garbage
// fails here.
//
// It runs on the idle device, and on one that also records graphs and
// reads asynchronously as runtime/cuda does (idleGPU), plain and
// pipelined (pipeline.go): the graph's key is made once, not per step.
func TestHostStepAllocs(t *testing.T) {
	for _, c := range []struct {
		name      string
		dev       runtime.Device
		pipelined bool
	}{{"idle", &idleDevice{}, false}, {"graphs", &idleGPU{}, false}, {"graphs, pipelined", &idleGPU{}, true}} {
		m, err := mlp.New(c.dev, mlp.Options{Batch: 64, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if c.pipelined {
			if err := m.Session().SetPipelined(true); err != nil {
				t.Fatal(err)
			}
		}
		x, y := make([]float32, 64*784), make([]int32, 64)
		n := stepAllocs(t, func() error { _, err := m.Step(x, y); return err })
		t.Logf("mlp on %s: %v allocations a step", c.name, n)
		if n > 0 {
			t.Errorf("mlp on %s: %v allocations in the host's part of a step, want none", c.name, n)
		}
		if g, ok := c.dev.(*idleGPU); ok && g.recorded == 0 {
			t.Errorf("mlp on %s: no step was recorded as a graph", c.name)
		}
	}
}

// idleGPU is the idle device with runtime/cuda's optional interfaces: it
// records graphs (counting them), has page-locked host memory read into
// asynchronously and a copy stream.
type idleGPU struct {
	idleDevice
	recorded int
}

func (d *idleGPU) BeginGraph(string) error { d.recorded++; return nil }
func (d *idleGPU) EndGraph(bool) error     { return nil }
func (d *idleGPU) AllocHost(n int64) (unsafe.Pointer, error) {
	b := make([]byte, n)
	return unsafe.Pointer(&b[0]), nil
}
func (d *idleGPU) FreeHost(unsafe.Pointer) error { return nil }
func (d *idleGPU) WaitHost(unsafe.Pointer) error { return nil }
func (d *idleGPU) CopyToHostAsync(dst unsafe.Pointer, src runtime.Ptr, n int64) error {
	return d.CopyToHost(dst, src, n)
}

func (d *idleGPU) Fence() (runtime.Fence, error) { return 1, nil }
func (d *idleGPU) JoinCopies() error             { return nil }
func (d *idleGPU) CopyToDeviceAfter(runtime.Fence, runtime.Ptr, unsafe.Pointer, int64) error {
	return nil
}

var (
	_ runtime.Grapher      = (*idleGPU)(nil)
	_ runtime.AsyncReader  = (*idleGPU)(nil)
	_ runtime.CopyStreamer = (*idleGPU)(nil)
)

// BenchmarkHostStep times the host's part of a training step: the
// session's work around the kernels with a device that does none, plain
// and as the GPU backend runs it (graphs recorded, the status read a step
// late: idleGPU, pipelined).
func BenchmarkHostStep(b *testing.B) {
	for _, gpu := range []bool{false, true} {
		dev := func() runtime.Device { return &idleDevice{} }
		suffix := ""
		if gpu {
			dev = func() runtime.Device { return &idleGPU{} }
			suffix = ", graphs, pipelined"
		}
		pipe := func(b *testing.B, s *runtime.Session) {
			if gpu {
				if err := s.SetPipelined(true); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run("mlp"+suffix, func(b *testing.B) {
			m, err := mlp.New(dev(), mlp.Options{Batch: 128, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			pipe(b, m.Session())
			x, y := make([]float32, 128*784), make([]int32, 128)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Step(x, y); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("gpt"+suffix, func(b *testing.B) {
			m, err := gpt.New(dev(), gpt.Options{Batch: 16, Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			pipe(b, m.Session())
			x, y := make([]int32, 16*128), make([]int32, 16*128)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Step(x, y); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
