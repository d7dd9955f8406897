package mlp_test

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
)

// TestAdversarialRuntime keeps the cases of the second adversarial pass
// (issue 13) that failed: a rate that is finite as a float64 but +Inf as
// the kernels' float32, non-finite SetParam values (which Load rejects),
// and nil readers, writers and buffer indices. Each must return an error
// (or nothing, for Elems), never panic, and leave the model as it was.
func TestAdversarialRuntime(t *testing.T) {
	x, y := batch(4, 1)
	nan := make([]float32, 10)
	nan[3] = float32(math.NaN())
	inf := make([]float32, 10)
	inf[9] = float32(math.Inf(-1))
	cases := map[string]func(m *mlp.Model) error{
		"SetLR(1e300)":  func(m *mlp.Model) error { return m.SetLR(1e300) },
		"SetParam NaN":  func(m *mlp.Model) error { return m.SetParam("fc3.bias", nan) },
		"SetParam -Inf": func(m *mlp.Model) error { return m.SetParam("fc3.bias", inf) },
		"Load(nil)":     func(m *mlp.Model) error { return m.Load(nil) },
		"Save(nil)":     func(m *mlp.Model) error { return m.Save(nil) },
	}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := mlp.New(device(t), mlp.Options{Batch: 4, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			before := save(t, m)
			if err := fn(m); err == nil {
				t.Fatal("no error")
			}
			if !bytes.Equal(before, save(t, m)) {
				t.Fatal("the failed call changed the model")
			}
			// The model still trains, with finite weights.
			if _, err := m.Step(x, y); err != nil {
				t.Fatal(err)
			}
			w, err := m.Param("fc3.bias")
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range w {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("fc3.bias holds %v after a step", v)
				}
			}
		})
	}
	m, err := mlp.New(device(t), mlp.Options{Batch: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if n := m.Session().Elems(-1); n != 0 {
		t.Fatalf("Elems(-1) = %d, want 0", n)
	}
}

func save(t *testing.T, m *mlp.Model) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := m.Save(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestNoDeviceNoSession: New and MaxBatch with a nil device, and a zero
// Model (declared, not made by New), panicked with a nil dereference; the
// methods that can fail now say why, and MemStats and ResetPeak, which
// return no error, return zero values (TestNilAndZeroModel covers a nil
// *Model too).
func TestNoDeviceNoSession(t *testing.T) {
	if _, err := mlp.New(nil, mlp.Options{Batch: 4}); err == nil || !strings.Contains(err.Error(), "device is nil") {
		t.Errorf("New(nil): %v", err)
	}
	if _, err := mlp.MaxBatch(nil, 1<<20); err == nil || !strings.Contains(err.Error(), "device is nil") {
		t.Errorf("MaxBatch(nil): %v", err)
	}
	var m mlp.Model
	x, y := batch(1, 1)
	m.Train()
	m.Eval()
	if m.Training() || len(m.Params()) != 0 || m.ResetPeak() || m.MemStats() != (runtime.MemStats{}) {
		t.Error("a zero Model reports training or parameters")
	}
	for name, fn := range map[string]func() error{
		"Step":     func() error { _, err := m.Step(x, y); return err },
		"Update":   func() error { return m.Update() },
		"Predict":  func() error { _, err := m.Predict(x); return err },
		"SetLR":    func() error { return m.SetLR(0.1) },
		"Param":    func() error { _, err := m.Param("fc3.bias"); return err },
		"Grad":     func() error { _, err := m.Grad("fc3.bias"); return err },
		"SetParam": func() error { return m.SetParam("fc3.bias", make([]float32, 10)) },
		"Save":     func() error { return m.Save(&bytes.Buffer{}) },
		"Load":     func() error { return m.Load(bytes.NewReader(nil)) },
		"Close":    func() error { return m.Close() },
	} {
		if err := fn(); err == nil || !strings.Contains(err.Error(), "not made by New") {
			t.Errorf("%s on a zero Model: %v", name, err)
		}
	}
}

// shortWriter takes half of every write and reports no error, breaking
// io.Writer's contract.
type shortWriter struct{ n int }

func (w *shortWriter) Write(p []byte) (int, error) { w.n += len(p) / 2; return len(p) / 2, nil }

// TestSaveShortWrite (issue 27's second hostile pass): Save ignored the
// count a writer returned, so a short write with no error left half a
// checkpoint and a nil error.
func TestSaveShortWrite(t *testing.T) {
	m, err := mlp.New(device(t), mlp.Options{Batch: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Save(&shortWriter{}); err == nil || !strings.Contains(err.Error(), "short write") {
		t.Fatalf("Save to a short writer: err = %v", err)
	}
}

// TestPredictOverflow (issue 27's second hostile pass): finite inputs of
// 3e38 overflow the forward pass, and Predict returned 20 NaN logits with
// a nil error; non-finite inputs were already refused. Now the outputs
// are checked too, and the model still predicts afterwards.
func TestPredictOverflow(t *testing.T) {
	m, err := mlp.New(device(t), mlp.Options{Batch: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Eval()
	huge := make([]float32, 2*784)
	for i := range huge {
		huge[i] = 3e38
	}
	if out, err := m.Predict(huge); err == nil || !strings.Contains(err.Error(), "the forward pass overflowed") {
		t.Fatalf("Predict of 3e38s: %v, err = %v", out[:min(len(out), 3)], err)
	}
	x, _ := batch(2, 1)
	if _, err := m.Predict(x); err != nil {
		t.Fatal(err)
	}
}
