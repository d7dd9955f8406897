package runtime_test

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestResolvedCalls: a session resolves each step's grid, GEMM arguments,
// copy sizes and launch arguments once per batch size (Session.execAt);
// steps whose batch changes back and forth, and one in eval mode, give,
// bit for bit, what a profiled session gives, which evaluates every call
// afresh. Planted by hand and seen to fail: a cache that ignores the
// batch size, one that ignores the train flag.
func TestResolvedCalls(t *testing.T) {
	run := func(profiled bool) []byte {
		m := openMLP16(t)
		m.Session().SetProfiling(profiled)
		r := rand.New(rand.NewPCG(9, 10))
		for i, rows := range []int{16, 7, 16, 3, 7, 16, 16} {
			x, y := clockBatch(r, false)
			if i == 5 {
				m.Eval() // a step without dropout: the train flag changes the arguments
			}
			if _, err := m.Step(x[:rows*784], y[:rows]); err != nil {
				t.Fatal(err)
			}
			m.Train()
			if _, err := m.Predict(x[:rows*784]); err != nil {
				t.Fatal(err)
			}
		}
		m.Session().SetProfiling(false)
		var buf bytes.Buffer
		if err := m.Save(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	if !bytes.Equal(run(false), run(true)) {
		t.Fatal("the checkpoints differ")
	}
}

// TestStepInputScannedForInference: a training step's inputs skip the
// host's scan for NaN and ±Inf (WriteStepInput); inference on such an
// input, not written again, scans the device's copy first and refuses
// a non-finite one as it refuses one given to WriteInput. Planted by hand
// and seen to fail: finiteInputs without the device scan.
func TestStepInputScannedForInference(t *testing.T) {
	m := openMLP16(t)
	s := m.Session()
	r := rand.New(rand.NewPCG(1, 1))
	x, y := clockBatch(r, true) // x[5] is +Inf
	if _, err := m.Step(x, y); err == nil {
		t.Fatal("a step on an infinite input succeeded")
	}
	if err := s.Run("predict", 16); err == nil || !strings.Contains(err.Error(), "inference refuses non-finite inputs") {
		t.Fatalf("inference on the step's infinite input: %v", err)
	}
	x, y = clockBatch(r, false)
	if _, err := m.Step(x, y); err != nil {
		t.Fatal(err)
	}
	if err := s.Run("predict", 16); err != nil {
		t.Fatalf("inference on the step's finite input: %v", err)
	}
}

// openMLP16 is the seed MLP at batch 16 on a one-thread CPU device, both
// closed when the test ends.
func openMLP16(t *testing.T) *mlp.Model {
	t.Helper()
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	m, err := mlp.New(dev, mlp.Options{Batch: 16, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
