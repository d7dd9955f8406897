package runtime_test

import (
	"testing"

	"github.com/ngen-ml/ngen/generated/rnn"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestModelPredictIsTheTypedPredict: runtime.Model (the registry's
// untyped API) and the typed package return the same thing from Predict,
// for a model whose predict has a named output (hn) beside its output.
func TestModelPredictIsTheTypedPredict(t *testing.T) {
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	g, err := runtime.Registered("github.com/ngen-ml/ngen/generated/rnn")
	if err != nil {
		t.Fatal(err)
	}
	in, err := g.SampleInputs("predict", 3, 7)
	if err != nil {
		t.Fatal(err)
	}
	m, err := g.New(dev, runtime.SessionOptions{MaxBatch: 3, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	typed, err := rnn.New(dev, rnn.Options{Batch: 3, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer typed.Close()
	for _, eval := range []bool{false, true} {
		if eval {
			m.Eval()
			typed.Eval()
		}
		got, err := m.Predict(in)
		if err != nil {
			t.Fatal(err)
		}
		want, err := typed.Predict(in["x"].([]int32), in["mask"].([]int32))
		if err != nil {
			t.Fatal(err)
		}
		g32, ok := got.([]float32)
		if !ok || len(g32) != len(want) {
			t.Fatalf("eval %v: runtime.Model.Predict gave %T of %d values, the typed Predict %d float32s", eval, got, len(g32), len(want))
		}
		for i := range want {
			if g32[i] != want[i] {
				t.Fatalf("eval %v: value %d: runtime.Model %g, typed %g", eval, i, g32[i], want[i])
			}
		}
	}
}

// TestModelMisuse: the registry's API refuses misuse with an error, not
// a panic or a silent default.
func TestModelMisuse(t *testing.T) {
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	g, err := runtime.Registered("mlp")
	if err != nil {
		t.Fatal(err)
	}
	var nilModel *runtime.Model
	var nilPkg *runtime.Generated
	for name, call := range map[string]func() error{
		"nil Model.Step":    func() error { _, err := nilModel.Step(runtime.Inputs{}); return err },
		"nil Model.Predict": func() error { _, err := nilModel.Predict(runtime.Inputs{}); return err },
		"nil Model.Save":    func() error { return nilModel.Save(nil) },
		"nil Model.Load":    func() error { return nilModel.Load(nil) },
		"nil Generated.New": func() error {
			_, err := nilPkg.New(dev, runtime.SessionOptions{MaxBatch: 2})
			return err
		},
		"SampleInputs of 0 rows":  func() error { _, err := g.SampleInputs("step", 0, 1); return err },
		"SampleInputs of -4 rows": func() error { _, err := g.SampleInputs("step", -4, 1); return err },
		"a symbol the model lacks": func() error {
			_, err := g.New(dev, runtime.SessionOptions{MaxBatch: 2, Symbols: map[string]int{"Q": 3}})
			return err
		},
		"B among Symbols": func() error {
			_, err := g.New(dev, runtime.SessionOptions{MaxBatch: 2, Symbols: map[string]int{"B": 3}})
			return err
		},
	} {
		if err := call(); err == nil {
			t.Errorf("%s: no error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if err := nilModel.Close(); err != nil {
		t.Errorf("nil Model.Close: %v, want nil as for a closed model", err)
	}
}
