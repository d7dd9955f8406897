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

// same fails unless s's parameters and optimizer state are before's.
func same(t *testing.T, s *runtime.Session, before map[string][]float64) {
	t.Helper()
	got := readTrained(t, s)
	for n, w := range before {
		closeTo(t, "unchanged "+n, got[n], w, 0, 0)
	}
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
		same(t, s, before)
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
		same(t, s, before)
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
		same(t, s, before)
	})
}

// TestAMPBF16AccumulatedOverflow: a bf16 model with a loss scaler (its
// scaled gradients can reach f32's range) accumulating 5 micro-batches,
// each of whose gradients is finite, at a scale that puts the largest
// in (FLT_MAX/4, FLT_MAX/2], so that the sum of four overflows: the
// update is skipped (GradScaler checks the gradients the step applies),
// not the update check's error, and nothing changes.
func TestAMPBF16AccumulatedOverflow(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows, k = 8, 5
	x, _, y := mlpBatch(rows, 9, 10)
	// Inputs a thousand times larger make gradients a thousand times
	// larger, so that a scale f32 holds (at most 2^127) reaches its range.
	for i := range x {
		x[i] *= 1000
	}
	session := func(scale float64) *runtime.Session {
		m, _ := ampMLPModel(ir.Optimizer{Kind: "sgd", LR: 0.1})
		m.Precision = &ir.Precision{Type: ir.BF16, Scaler: &ir.LossScaler{Init: scale, Growth: 2, Backoff: 0.5, Interval: 100}}
		prog, err := compiler.Compile(m, compiler.Options{Fuse: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, prog, runtime.SessionOptions{MaxBatch: rows, Seed: 4, AccumulationSteps: k})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	micro := func(s *runtime.Session) []float64 {
		t.Helper()
		if err := s.WriteInput("x", x, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteInput("y", y, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.Run("step", rows); err != nil {
			t.Fatalf("micro-batch %d: %v", s.Pending(), err)
		}
		return readNamed(t, s, "grads", "grads")
	}
	// The largest gradient at scale 1 sets the scale, a power of two.
	var g float64
	for _, v := range micro(session(1)) {
		g = max(g, math.Abs(v))
	}
	_, e := math.Frexp(math.MaxFloat32 / g)
	scale := math.Ldexp(1, e-2) // g·scale in (FLT_MAX/4, FLT_MAX/2]
	if scale > 0x1p127 {
		t.Fatalf("largest gradient %g at scale 1: too small for a scale f32 holds to reach its range", g)
	}
	s := session(scale)
	before := readTrained(t, s)
	for i := 1; i < k; i++ {
		big := 0.0
		for _, v := range micro(s) {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("micro-batch %d at scale %g: a gradient is %g; the test wants finite ones", i, scale, v)
			}
			big = max(big, math.Abs(v))
		}
		if big <= math.MaxFloat32/4 {
			t.Fatalf("micro-batch %d: largest gradient %g; the test wants one above FLT_MAX/4", i, big)
		}
	}
	if err := s.WriteInput("x", x, rows); err != nil {
		t.Fatal(err)
	}
	if err := s.Run("step", rows); err != nil {
		t.Fatalf("the update of an overflowing sum: %v; want a skipped step", err)
	}
	if !s.StepSkipped() || s.Steps() != 0 || s.ScheduleSteps() != 1 || s.LossScale() != float64(float32(scale/2)) {
		t.Errorf("after the update: skipped %v, steps %d, schedule %d, scale %g (want %g)", s.StepSkipped(), s.Steps(), s.ScheduleSteps(), s.LossScale(), scale/2)
	}
	same(t, s, before)
}
