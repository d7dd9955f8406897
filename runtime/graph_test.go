package runtime_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/ngen-ml/ngen/generated/convnet_bn"
	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// deferring is a runtime.Grapher on the CPU: like runtime/cuda, it
// defers the stream-ordered calls between BeginGraph and EndGraph and
// issues them at EndGraph, and it notes any other call made in between
// (which would make the GPU give up the step's graph).
type deferring struct {
	*cpu.Device
	open    bool
	pending []func() error
	keys    []string
	escaped []string
	// launches counts Launch calls, deferred or not.
	launches int
}

func (d *deferring) BeginGraph(key string) error {
	d.open, d.keys = true, append(d.keys, key)
	return nil
}

func (d *deferring) EndGraph(capture bool) error {
	d.open = false
	calls := d.pending
	d.pending = nil
	for _, f := range calls {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

func (d *deferring) later(f func() error) error {
	if d.open {
		d.pending = append(d.pending, f)
		return nil
	}
	return f()
}

func (d *deferring) note(what string) {
	if d.open {
		d.escaped = append(d.escaped, what)
	}
}

func (d *deferring) Launch(f runtime.Function, grid, block runtime.Dim3, shared int, args ...runtime.Arg) error {
	d.launches++
	args = slices.Clone(args) // the session reuses the slice (Device.Launch)
	return d.later(func() error { return d.Device.Launch(f, grid, block, shared, args...) })
}

func (d *deferring) Gemm(g runtime.GemmArgs) error {
	return d.later(func() error { return d.Device.Gemm(g) })
}

func (d *deferring) Memset(p runtime.Ptr, v byte, n int64) error {
	return d.later(func() error { return d.Device.Memset(p, v, n) })
}

func (d *deferring) CopyDevice(dst, src runtime.Ptr, n int64) error {
	return d.later(func() error { return d.Device.CopyDevice(dst, src, n) })
}

func (d *deferring) CopyToHost(dst unsafe.Pointer, src runtime.Ptr, n int64) error {
	d.note("CopyToHost")
	return d.Device.CopyToHost(dst, src, n)
}

func (d *deferring) CopyToDevice(dst runtime.Ptr, src unsafe.Pointer, n int64) error {
	d.note("CopyToDevice")
	return d.Device.CopyToDevice(dst, src, n)
}

func (d *deferring) Sync() error {
	d.note("Sync")
	return d.Device.Sync()
}

func (d *deferring) Alloc(n int64) (runtime.Ptr, error) {
	d.note("Alloc")
	return d.Device.Alloc(n)
}

func (d *deferring) Free(p runtime.Ptr) error {
	d.note("Free")
	return d.Device.Free(p)
}

// TestSessionGraphs runs training steps (the seed MLP with dropout, whose
// masks depend on the step, and the ConvNet with batch norm) on a device
// that defers each step's calls as runtime/cuda records a CUDA graph, and
// wants: the same losses as the plain CPU device, bit for bit; no host
// call inside a step (it would make the GPU give up the graph); one key
// per step, equal across steps at one batch size and different at
// another; predict graphed under its own key.
func TestSessionGraphs(t *testing.T) {
	type stepper interface {
		Step(x []float32, y []int32) (float32, error)
		Predict(x []float32) ([]float32, error)
		Close() error
	}
	for _, c := range []struct {
		name string
		in   int
		open func(runtime.Device) (stepper, error)
	}{
		{"mlp", 784, func(d runtime.Device) (stepper, error) { return mlp.New(d, mlp.Options{Batch: 16, Seed: 3}) }},
		{"convnet_bn", 784, func(d runtime.Device) (stepper, error) {
			return convnet_bn.New(d, convnet_bn.Options{Batch: 16, Seed: 3})
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var losses [2][]float32
			var rec *deferring
			for side := range 2 {
				base, err := cpu.New(cpu.Options{Threads: 1})
				if err != nil {
					t.Fatal(err)
				}
				defer base.Close()
				var dev runtime.Device = base
				if side == 1 {
					rec = &deferring{Device: base}
					dev = rec
				}
				m, err := c.open(dev)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				r := rand.New(rand.NewPCG(1, 1))
				for _, n := range []int{16, 16, 8, 16} {
					x, y := make([]float32, n*c.in), make([]int32, n)
					for i := range x {
						x[i] = r.Float32()
					}
					for i := range y {
						y[i] = int32(r.IntN(10))
					}
					l, err := m.Step(x, y)
					if err != nil {
						t.Fatal(err)
					}
					losses[side] = append(losses[side], l)
				}
				out, err := m.Predict(make([]float32, 4*c.in))
				if err != nil {
					t.Fatal(err)
				}
				losses[side] = append(losses[side], out...)
			}
			if fmt.Sprint(losses[0]) != fmt.Sprint(losses[1]) {
				t.Fatalf("losses %v plain, %v deferred", losses[0], losses[1])
			}
			if len(rec.escaped) > 0 {
				t.Fatalf("host calls inside a step: %v", rec.escaped)
			}
			k := rec.keys
			if len(k) != 5 || k[0] != k[1] || k[0] != k[3] || k[0] == k[2] || !strings.Contains(k[0], ".step") || !strings.Contains(k[4], ".predict") {
				t.Fatalf("graph keys %q: want one per step, equal at one batch size", k)
			}
		})
	}
}

// TestSessionGraphsClipping: the seed MLP compiles gradient clipping in,
// off. Toggling it between steps (off, on, off, on, on) on a device that
// defers each step as runtime/cuda records a CUDA graph gives the plain
// CPU device's losses and parameters bit for bit; a step launches the
// grad-norm kernel only while clipping (one launch more than off); and
// the graph key says which state the step ran in, so a CUDA device keeps
// one graph for each instead of re-capturing at every toggle.
func TestSessionGraphsClipping(t *testing.T) {
	norms := []float64{math.Inf(1), 0.5, math.Inf(1), 0.5, 0.5}
	var runs [2][]float32
	var rec *deferring
	var perStep []int
	for side := range 2 {
		base, err := cpu.New(cpu.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer base.Close()
		var dev runtime.Device = base
		if side == 1 {
			rec = &deferring{Device: base}
			dev = rec
		}
		m, err := mlp.New(dev, mlp.Options{Batch: 16, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if !m.Session().Plan().Optimizer.GradNorm() {
			t.Fatal("the seed MLP has no grad-norm kernel: regenerate it")
		}
		r := rand.New(rand.NewPCG(1, 1))
		for _, norm := range norms {
			if err := m.Session().SetClipNorm(norm); err != nil {
				t.Fatal(err)
			}
			x, y := make([]float32, 16*784), make([]int32, 16)
			for i := range x {
				x[i] = r.Float32()
			}
			for i := range y {
				y[i] = int32(r.IntN(10))
			}
			n := 0
			if rec != nil {
				n = rec.launches
			}
			l, err := m.Step(x, y)
			if err != nil {
				t.Fatal(err)
			}
			if rec != nil {
				perStep = append(perStep, rec.launches-n)
			}
			runs[side] = append(runs[side], l)
		}
		i, err := m.Session().Lookup("param", "fc1.weight")
		if err != nil {
			t.Fatal(err)
		}
		w, err := m.Session().ReadFloats(i)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range w[:64] {
			runs[side] = append(runs[side], float32(v))
		}
	}
	if fmt.Sprint(runs[0]) != fmt.Sprint(runs[1]) {
		t.Fatalf("losses and weights %v plain, %v deferred", runs[0], runs[1])
	}
	if len(rec.escaped) > 0 {
		t.Fatalf("host calls inside a step: %v", rec.escaped)
	}
	k := rec.keys
	offKey, onKey := k[0], k[1]
	if !strings.HasSuffix(offKey, " clipping=off") || !strings.HasSuffix(onKey, " clipping=on") || k[2] != offKey || k[3] != onKey || k[4] != onKey {
		t.Fatalf("graph keys %q: want one for clipping off and one for on", k)
	}
	if off, on := perStep[0], perStep[1]; on != off+1 || perStep[2] != off || perStep[3] != on || perStep[4] != on {
		t.Fatalf("launches per step %v: want the grad-norm kernel's one more while clipping", perStep)
	}
}
