package jit

import (
	"errors"
	"math"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// readTrained is every parameter and every optimizer state value.
func readTrained(t *testing.T, s *runtime.Session) map[string][]float64 {
	t.Helper()
	out := readParams(t, s)
	for _, n := range s.Names("state") {
		out["state "+n] = readNamed(t, s, "state", n)
	}
	return out
}

// TestAMPF16NonFiniteLoss: under a loss scaler, a step whose loss is
// not finite (an input of +Inf: the f16 forward pass gives NaN logits)
// is a skipped step, as PyTorch's scaler.step skips on the NaN
// gradients such a loss gives: no error, no parameter or optimizer state
// changes, the step counter (Adam's t) stays, the schedule's counter
// advances, the scale backs off and the growth tracker resets; with
// gradient accumulation the update it belongs to is skipped whole.
// Without a scaler the same step is the LossError it always was.
func TestAMPF16NonFiniteLoss(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows = 8
	x, _, y := mlpBatch(rows, 7, 8)
	bad := append([]float32(nil), x...)
	bad[3] = float32(math.Inf(1))
	opt := ir.Optimizer{Kind: "adam", LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Schedule: &schedule.Schedule{Kind: "step", StepSize: 2, Gamma: 0.5}}
	session := func(t *testing.T, sc *ir.LossScaler, typ ir.DType, k int) *runtime.Session {
		t.Helper()
		m, _ := ampMLPModel(opt)
		m.Precision = &ir.Precision{Type: typ, Scaler: sc}
		prog, err := compiler.Compile(m, compiler.Options{Fuse: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, prog, runtime.SessionOptions{MaxBatch: rows, Seed: 5, AccumulationSteps: k})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	step := func(t *testing.T, s *runtime.Session, x []float32) error {
		t.Helper()
		if err := s.WriteInput("x", x, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteInput("y", y, rows); err != nil {
			t.Fatal(err)
		}
		return s.Run("step", rows)
	}
	same := func(t *testing.T, what string, got, want map[string][]float64) {
		t.Helper()
		for n, w := range want {
			closeTo(t, what+": "+n, got[n], w, 0, 0)
		}
	}
	sc := ir.LossScaler{Init: 0x1p10, Growth: 2, Backoff: 0.5, Interval: 100}

	t.Run("step", func(t *testing.T) {
		s := session(t, &sc, ir.F16, 1)
		for range 3 {
			if err := step(t, s, x); err != nil || s.StepSkipped() {
				t.Fatalf("a finite step: %v, skipped %v", err, s.StepSkipped())
			}
		}
		before, lr := readTrained(t, s), s.LR()
		if err := step(t, s, bad); err != nil {
			t.Fatalf("a non-finite loss under a scaler: %v; want a skipped step", err)
		}
		if l, _ := s.StepLoss(); !math.IsNaN(l) && !math.IsInf(l, 0) {
			t.Errorf("the loss is %g: the test planted no non-finite loss", l)
		}
		st, _ := s.Scaler()
		if !s.StepSkipped() || s.Steps() != 3 || s.ScheduleSteps() != 4 || s.LossScale() != 0x1p9 || st.GrowthTracker != 0 || st.Skipped != 1 {
			t.Errorf("after the skip: skipped %v, steps %d (want 3), schedule %d (want 4), scale %g (want 2^9), scaler %+v",
				s.StepSkipped(), s.Steps(), s.ScheduleSteps(), s.LossScale(), st)
		}
		same(t, "after the skipped step", readTrained(t, s), before)
		// StepLR(step_size 2, gamma 0.5): the fifth update's rate.
		if s.LR() != lr/2 {
			t.Errorf("the next rate is %g, want %g (the schedule advances on a skip)", s.LR(), lr/2)
		}
		if err := step(t, s, x); err != nil || s.StepSkipped() || s.Steps() != 4 || s.ScheduleSteps() != 5 {
			t.Fatalf("the step after: %v, skipped %v, steps %d, schedule %d", err, s.StepSkipped(), s.Steps(), s.ScheduleSteps())
		}
	})

	t.Run("accumulate", func(t *testing.T) {
		s := session(t, &sc, ir.F16, 2)
		before := readTrained(t, s)
		if err := step(t, s, x); err != nil {
			t.Fatal(err)
		}
		if err := step(t, s, bad); err != nil {
			t.Fatalf("a micro-batch with a non-finite loss under a scaler: %v", err)
		}
		if !s.StepSkipped() || s.Steps() != 0 || s.ScheduleSteps() != 1 || s.Pending() != 0 || s.LossScale() != 0x1p9 {
			t.Errorf("after the update: skipped %v, steps %d, schedule %d, pending %d, scale %g", s.StepSkipped(), s.Steps(), s.ScheduleSteps(), s.Pending(), s.LossScale())
		}
		same(t, "after the skipped update", readTrained(t, s), before)
	})

	t.Run("no scaler", func(t *testing.T) {
		s := session(t, nil, ir.BF16, 1)
		if err := step(t, s, x); err != nil {
			t.Fatal(err)
		}
		before := readTrained(t, s)
		err := step(t, s, bad)
		if le := (*runtime.LossError)(nil); !errors.As(err, &le) {
			t.Fatalf("a non-finite loss without a scaler: %v; want a *runtime.LossError", err)
		}
		if s.StepSkipped() || s.Steps() != 1 || s.ScheduleSteps() != 1 {
			t.Errorf("after the error: skipped %v, steps %d, schedule %d", s.StepSkipped(), s.Steps(), s.ScheduleSteps())
		}
		same(t, "after the failed step", readTrained(t, s), before)
	})
}
