package mlp_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// Memory statistics, the batch-size finder and out-of-memory handling,
// under a CPU device's MemoryLimit.

func TestMemStats(t *testing.T) {
	dev := device(t)
	m, err := mlp.New(dev, mlp.Options{Batch: 64, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := runtime.SessionBytes(dev, mlp.Plan, runtime.SessionOptions{MaxBatch: 64})
	st := m.MemStats()
	if st.Allocated != want || m.Session().MemoryBytes() != want || st.Peak < want || st.Reserved < st.Allocated {
		t.Fatalf("MemStats %+v, session %d bytes, planned %d", st, m.Session().MemoryBytes(), want)
	}
	// A second, larger model raises the peak; closing it lowers what is
	// allocated but not the peak, until ResetPeak.
	big, err := mlp.New(dev, mlp.Options{Batch: 512, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	bigBytes := runtime.SessionBytes(dev, mlp.Plan, runtime.SessionOptions{MaxBatch: 512})
	big.Close()
	st = m.MemStats()
	if st.Allocated != want || st.Peak != want+bigBytes {
		t.Fatalf("after closing the larger model: %+v, want allocated %d, peak %d", st, want, want+bigBytes)
	}
	if !m.ResetPeak() || m.MemStats().Peak != want {
		t.Fatalf("after ResetPeak: %+v", m.MemStats())
	}
}

func TestOutOfMemory(t *testing.T) {
	const limit = 24 << 20 // the MLP's parameters, gradients and Adam state take 8.2 MiB
	dev, err := cpu.New(cpu.Options{MemoryLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	// A small model first: it must survive its neighbour's failure.
	small, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	x, y := batch(8, 3)
	before, err := small.Step(x, y)
	if err != nil {
		t.Fatal(err)
	}
	used := dev.MemStats().Allocated

	max, err := mlp.MaxBatch(dev, 0) // what the device can still supply
	if err != nil {
		t.Fatal(err)
	}
	if max < 8 {
		t.Fatalf("MaxBatch %d", max)
	}
	_, err = mlp.New(dev, mlp.Options{Batch: max + 1, Seed: 2})
	var oom *runtime.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("New(MaxBatch+1 = %d): %v, want an out-of-memory error", max+1, err)
	}
	if oom.Requested <= oom.Available || oom.Available < 0 || oom.Limit != limit {
		t.Fatalf("error %+v", oom)
	}
	for _, s := range []string{"out of memory", "requested", "available", "mlp"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	t.Logf("MaxBatch %d; New(%d): %v", max, max+1, err)
	// Nothing leaked, the neighbour still trains, and the found batch fits.
	if got := dev.MemStats().Allocated; got != used {
		t.Fatalf("after the failed New %d bytes allocated, before %d", got, used)
	}
	if l, err := small.Step(x, y); err != nil || l == before {
		t.Fatalf("neighbour after the failure: loss %v (was %v), %v", l, before, err)
	}
	m, err := mlp.New(dev, mlp.Options{Batch: max, Seed: 2})
	if err != nil {
		t.Fatalf("New(MaxBatch = %d): %v", max, err)
	}
	xb, yb := batch(max, 4)
	if _, err := m.Step(xb, yb); err != nil {
		t.Fatal(err)
	}
	m.Close()

	// A fixed budget: the found batch fits in it and one more does not.
	for _, budget := range []int64{12 << 20, 16 << 20} {
		b, err := mlp.MaxBatch(dev, budget)
		if err != nil {
			t.Fatal(err)
		}
		at := func(n int) int64 { return runtime.SessionBytes(dev, mlp.Plan, runtime.SessionOptions{MaxBatch: n}) }
		if at(b) > budget || at(b+1) <= budget {
			t.Fatalf("budget %d: MaxBatch %d needs %d, %d needs %d", budget, b, at(b), b+1, at(b+1))
		}
		d2, _ := cpu.New(cpu.Options{MemoryLimit: budget})
		if m, err := mlp.New(d2, mlp.Options{Batch: b}); err != nil {
			t.Fatalf("budget %d: New(%d): %v", budget, b, err)
		} else {
			m.Close()
		}
		if _, err := mlp.New(d2, mlp.Options{Batch: b + 1}); !runtime.IsOutOfMemory(err) {
			t.Fatalf("budget %d: New(%d): %v, want out of memory", budget, b+1, err)
		}
		d2.Close()
	}
	if _, err := mlp.MaxBatch(dev, 1000); !runtime.IsOutOfMemory(err) {
		t.Fatalf("MaxBatch with a 1000-byte budget: %v", err)
	}
}
