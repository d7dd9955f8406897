package mlp_test

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
)

// TestClosedModel: issue 13 found Step, SetParam and Load on a closed
// model returning nil or garbage and then aborting the process. Every
// method that can fail now says the model is closed.
func TestClosedModel(t *testing.T) {
	m, err := mlp.New(device(t), mlp.Options{Batch: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	var ckpt bytes.Buffer
	if err := m.Save(&ckpt); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	x, y := batch(4, 1)
	w := make([]float32, 10)
	checks := map[string]func() error{
		"Step":       func() error { _, err := m.Step(x, y); return err },
		"Accumulate": func() error { _, err := m.Accumulate(x, y); return err },
		"Update":     func() error { return m.Update() },
		"Predict":    func() error { _, err := m.Predict(x); return err },
		"Param":      func() error { _, err := m.Param("fc3.bias"); return err },
		"Grad":       func() error { _, err := m.Grad("fc3.bias"); return err },
		"SetParam":   func() error { return m.SetParam("fc3.bias", w) },
		"SetLR":      func() error { return m.SetLR(0.1) },
		"Save":       func() error { return m.Save(&bytes.Buffer{}) },
		"Load":       func() error { return m.Load(bytes.NewReader(ckpt.Bytes())) },
	}
	for name, f := range checks {
		if err := f(); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("%s on a closed model: %v", name, err)
		}
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestHugeBatch: Options.Batch of 2^62+1 passed New and corrupted the
// heap on the next step; New rejects batches whose buffers cannot exist.
func TestHugeBatch(t *testing.T) {
	for _, b := range []int{1<<62 + 1, 1 << 40, 1<<31 + 5, 1<<31 - 1} {
		m, err := mlp.New(device(t), mlp.Options{Batch: b})
		if err == nil {
			m.Close()
			t.Fatalf("batch %d accepted", b)
		}
		t.Logf("batch %d: %v", b, err)
	}
}

// TestConcurrentUse: a model is safe for concurrent use (each method runs
// alone); before, two goroutines raced and four hit "concurrent map read
// and map write". Run under -race by scripts/test.sh.
func TestConcurrentUse(t *testing.T) {
	m, err := mlp.New(device(t), mlp.Options{Batch: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			x, y := batch(4, uint64(g))
			for i := 0; i < 3; i++ {
				if _, err := m.Step(x, y); err != nil {
					errs <- err
				}
				m.Eval()
				if _, err := m.Predict(x); err != nil {
					errs <- err
				}
				m.Train()
				if _, err := m.Param("fc1.bias"); err != nil {
					errs <- err
				}
				if err := m.SetLR(1e-3); err != nil {
					errs <- err
				}
			}
		}(g)
	}
	wg.Wait()
	for len(errs) > 0 {
		t.Error(<-errs)
	}
	if err := m.Session().SetAccumulationSteps(-2); err == nil {
		t.Error("SetAccumulationSteps(-2) accepted")
	}
	if got := m.Session().Steps(); got != 12 {
		t.Fatalf("%d steps counted, want 12", got)
	}
}
