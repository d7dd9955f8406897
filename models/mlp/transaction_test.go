package mlp_test

import (
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
)

// snapshot is everything a step may change: the parameters, the optimizer
// state, the step count.
type snapshot struct {
	steps int
	bufs  map[string][]float64
}

func snap(t *testing.T, s *runtime.Session) snapshot {
	t.Helper()
	sn := snapshot{steps: s.Steps(), bufs: map[string][]float64{}}
	for _, role := range []string{"param", "state"} {
		for _, name := range s.Names(role) {
			i, err := s.Lookup(role, name)
			if err != nil {
				t.Fatal(err)
			}
			v, err := s.ReadFloats(i)
			if err != nil {
				t.Fatal(err)
			}
			sn.bufs[role+":"+name] = v
		}
	}
	return sn
}

// same fails unless a and b are bit for bit equal.
func same(t *testing.T, what string, a, b snapshot) {
	t.Helper()
	if a.steps != b.steps {
		t.Fatalf("%s: step count %d, want %d", what, a.steps, b.steps)
	}
	changed := 0
	for k, va := range a.bufs {
		vb := b.bufs[k]
		for i := range va {
			if math.Float64bits(va[i]) != math.Float64bits(vb[i]) {
				changed++
				break
			}
		}
	}
	if changed > 0 || len(a.bufs) != len(b.bufs) {
		t.Fatalf("%s: %d of %d tensors changed", what, changed, len(a.bufs))
	}
}

// TestFailedStepChangesNothing: issue 13's two examples (a label out of
// range changed 53 of 67 parameters and advanced the step count; one NaN
// in the input turned every weight NaN). A failed step leaves parameters,
// optimizer state, step count and the dropout counter as they were, so
// the next good steps give bit for bit what a model that never saw the
// bad batch gives.
func TestFailedStepChangesNothing(t *testing.T) {
	dev := device(t)
	a, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	x, y := batch(8, 2)
	for _, m := range []*mlp.Model{a, b} { // optimizer state and step count non-trivial
		if _, err := m.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	before := snap(t, a.Session())
	badY := append([]int32(nil), y...)
	badY[3] = 10
	if _, err := a.Step(x, badY); err == nil || !strings.Contains(err.Error(), "label 10 at row 3") || !strings.Contains(err.Error(), "models/mlp/model.go:") {
		t.Fatalf("label out of range: %v", err)
	}
	same(t, "after a label out of range", snap(t, a.Session()), before)
	nanX := append([]float32(nil), x...)
	nanX[100] = float32(math.NaN())
	if _, err := a.Step(nanX, y); err == nil || !strings.Contains(err.Error(), "loss is NaN") || !strings.Contains(err.Error(), "models/mlp/model.go:") {
		t.Fatalf("NaN input: %v", err)
	}
	same(t, "after a NaN in the input", snap(t, a.Session()), before)
	if err := a.SetLR(math.NaN()); err == nil {
		t.Fatal("SetLR(NaN) accepted")
	}
	for i := 0; i < 2; i++ {
		la, err := a.Step(x, y)
		if err != nil {
			t.Fatalf("good step after failed ones: %v", err)
		}
		lb, err := b.Step(x, y)
		if err != nil {
			t.Fatal(err)
		}
		if la != lb || math.IsNaN(float64(la)) {
			t.Fatalf("step %d: loss %v, want %v", i, la, lb)
		}
	}
	same(t, "good steps after failed ones", snap(t, a.Session()), snap(t, b.Session()))
}

// TestFailedMicroBatchAddsNothing: with accumulation, a failed micro-batch
// adds nothing and is not counted.
func TestFailedMicroBatchAddsNothing(t *testing.T) {
	dev := device(t)
	a, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 5, AccumulationSteps: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 5, AccumulationSteps: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	x1, y1 := batch(8, 3)
	x2, y2 := batch(8, 4)
	nanX := append([]float32(nil), x2...)
	nanX[7] = float32(math.Inf(1))
	badY := append([]int32(nil), y2...)
	badY[0] = -1
	if _, err := a.Step(x1, y1); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Step(nanX, y2); err == nil {
		t.Fatal("Inf input: no error")
	}
	if _, err := a.Step(x2, badY); err == nil {
		t.Fatal("label -1: no error")
	}
	if _, err := a.Step(x2, y2); err != nil {
		t.Fatal(err)
	}
	for _, xy := range [][2]any{{x1, y1}, {x2, y2}} {
		if _, err := b.Step(xy[0].([]float32), xy[1].([]int32)); err != nil {
			t.Fatal(err)
		}
	}
	same(t, "accumulation with failed micro-batches", snap(t, a.Session()), snap(t, b.Session()))
}

// countingDevice counts device-to-host copies, each a synchronisation on
// a GPU.
type countingDevice struct {
	runtime.Device
	reads int
}

func (d *countingDevice) CopyToHost(dst unsafe.Pointer, src runtime.Ptr, n int64) error {
	d.reads++
	return d.Device.CopyToHost(dst, src, n)
}

// TestOneReadPerStep: issue 12 item 5. A training step reads the device
// once (the status block, which carries the loss and the checks' verdict),
// failed or not; before, the status word, a finiteness check and the loss
// were three reads.
func TestOneReadPerStep(t *testing.T) {
	dev := &countingDevice{Device: device(t)}
	m, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, y := batch(8, 1)
	bad := append([]int32(nil), y...)
	bad[0] = 11
	for i, yy := range [][]int32{y, y, bad, y} {
		dev.reads = 0
		loss, err := m.Step(x, yy)
		if (err != nil) != (i == 2) || (err == nil && (loss <= 0 || math.IsNaN(float64(loss)))) {
			t.Fatalf("step %d: loss %v, err %v", i, loss, err)
		}
		if dev.reads != 1 {
			t.Fatalf("step %d read the device %d times, want 1", i, dev.reads)
		}
	}
}
