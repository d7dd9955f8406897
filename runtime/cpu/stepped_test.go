package cpu_test

import (
	"testing"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// countingDev counts each kernel's launches and the launch index each one
// was passed (a stepped kernel's last argument).
type countingDev struct {
	*cpu.Device
	launches map[string][]int32
	stepped  map[string]bool
}

func (d *countingDev) Launch(f runtime.Function, grid, block runtime.Dim3, shared int, args ...runtime.Arg) error {
	i := int32(-1)
	if d.stepped[f.Name()] {
		i = args[len(args)-1].(int32)
	}
	d.launches[f.Name()] = append(d.launches[f.Name()], i)
	return d.Device.Launch(f, grid, block, shared, args...)
}

// TestSteppedLaunches: a recurrence whose GPU form is stepped
// (runtime.KernelInfo.Steps: the generated rnn package's scans, T = 16
// steps) is launched T times forward and T+1 times backward, with indexes
// 0, 1, …, where the device runs that form (cpu.Options.GPUBlocks, as a
// GPU does), and once, index 0, where it runs a host form that loops over
// time itself (the default and the baseline forms: runtime.WholeLoops).
// The steps' losses agree.
func TestSteppedLaunches(t *testing.T) {
	g, err := runtime.Registered("rnn")
	if err != nil {
		t.Fatal(err)
	}
	stepped := map[string]int{}
	for _, k := range g.Module().Kernels {
		if k.Steps > 0 {
			stepped[k.Name] = k.Steps
		}
	}
	if len(stepped) != 2 {
		t.Fatalf("the rnn package has stepped kernels %v, want its forward and backward scans", stepped)
	}
	const batch = 4
	in, err := g.SampleInputs("step", batch, 1)
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for _, tc := range []struct {
		name  string
		opts  cpu.Options
		whole bool
	}{
		{"host forms", cpu.Options{Threads: 2}, true},
		{"baseline forms", cpu.Options{Threads: 2, Baseline: true}, true},
		{"GPU blocks", cpu.Options{Threads: 2, GPUBlocks: true}, false},
	} {
		dev := &countingDev{Device: newDev(t, tc.opts), launches: map[string][]int32{}, stepped: map[string]bool{}}
		for name := range stepped {
			dev.stepped[name] = true
		}
		m, err := g.New(dev, runtime.SessionOptions{MaxBatch: batch, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		loss, err := m.Step(in)
		m.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		losses = append(losses, loss)
		for name, n := range stepped {
			got := dev.launches[name]
			want := []int32{0}
			if !tc.whole {
				want = make([]int32, n)
				for i := range want {
					want[i] = int32(i)
				}
			}
			if len(got) != len(want) {
				t.Errorf("%s: %s launched %d times, want %d", tc.name, name, len(got), len(want))
				continue
			}
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("%s: %s's launch %d had index %d, want %d", tc.name, name, i, got[i], want[i])
					break
				}
			}
		}
	}
	for i, l := range losses[1:] {
		if d := l - losses[0]; d > 1e-5*losses[0] || d < -1e-5*losses[0] {
			t.Errorf("loss %v with %d, %v with the host forms", l, i+1, losses[0])
		}
	}
}

// forgetful hides the CPU device's runtime.WholeLoops, as a wrapper that
// forwards only runtime.Device's methods would.
type forgetful struct{ runtime.Device }

// TestSteppedLaunchesWithoutWholeLoops: a session on a wrapper that hides
// WholeLoops launches the rnn package's scans once a step, as for a GPU;
// the CPU device runs its host form at the first launch and returns at
// once from the others (31 here, counted by hand when this was written:
// the loss alone cannot tell, since the host form computes the same at
// every launch), and the step's loss is the unwrapped one, bit for bit.
func TestSteppedLaunchesWithoutWholeLoops(t *testing.T) {
	g, err := runtime.Registered("rnn")
	if err != nil {
		t.Fatal(err)
	}
	in, err := g.SampleInputs("step", 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for _, wrap := range []bool{false, true} {
		var dev runtime.Device = newDev(t, cpu.Options{Threads: 2})
		if wrap {
			dev = forgetful{dev}
		}
		m, err := g.New(dev, runtime.SessionOptions{MaxBatch: 4, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		loss, err := m.Step(in)
		m.Close()
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, loss)
	}
	if losses[0] != losses[1] {
		t.Fatalf("loss %v unwrapped, %v through a wrapper without WholeLoops", losses[0], losses[1])
	}
}
