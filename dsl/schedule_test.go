package dsl

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime/schedule"
)

// TestScheduleLowering: each schedule lowers to its data with PyTorch's
// defaults for zero fields, on every optimizer.
func TestScheduleLowering(t *testing.T) {
	for _, c := range []struct {
		s    Schedule
		want schedule.Schedule
	}{
		{StepLR{StepSize: 30}, schedule.Schedule{Kind: "step", StepSize: 30, Gamma: 0.1}},
		{MultiStepLR{Milestones: []int{10, 20}, Gamma: 0.5}, schedule.Schedule{Kind: "multistep", Milestones: []int{10, 20}, Gamma: 0.5}},
		{ExponentialLR{Gamma: 0.99}, schedule.Schedule{Kind: "exponential", Gamma: 0.99}},
		{ConstantLR{}, schedule.Schedule{Kind: "constant", Factor: 1.0 / 3, Iters: 5}},
		{LinearLR{StartFactor: 0.1, Iters: 100}, schedule.Schedule{Kind: "linear", StartFactor: 0.1, EndFactor: 1, Iters: 100}},
		{CosineAnnealingLR{TMax: 50, EtaMin: 1e-5}, schedule.Schedule{Kind: "cosine", TMax: 50, Min: 1e-5}},
		{OneCycleLR{TotalSteps: 1000}, schedule.Schedule{Kind: "onecycle", Total: 1000, PctStart: 0.3, DivFactor: 25, FinalDivFactor: 1e4}},
		{WarmupCosine{Warmup: 200, Total: 10000, Min: 3e-5}, schedule.Schedule{Kind: "warmup_cosine", Iters: 200, Total: 10000, Min: 3e-5, StartFactor: 1.0 / 200}},
		{WarmupCosine{Total: 100}, schedule.Schedule{Kind: "warmup_cosine", Total: 100, StartFactor: 1}},
	} {
		for _, o := range []Optimizer{Adam{LR: 3e-4, Schedule: c.s}, AdamW{LR: 3e-4, Schedule: c.s}, SGD{LR: 3e-4, Schedule: c.s}} {
			m := NewModel("s")
			m.Optimizer(o)
			if m.Err() != nil {
				t.Fatalf("%#v: %v", o, m.Err())
			}
			got := m.m.Optimizer.Schedule
			if got == nil || !reflect.DeepEqual(*got, c.want) {
				t.Errorf("%#v: schedule %+v, want %+v", o, got, c.want)
			}
		}
	}
	m := NewModel("plain")
	m.Optimizer(Adam{LR: 1e-3})
	if m.m.Optimizer.Schedule != nil {
		t.Errorf("a plain rate lowered to schedule %+v", m.m.Optimizer.Schedule)
	}
}

// TestScheduleErrors: a bad schedule is an error naming the optimizer and
// the line that sets it.
func TestScheduleErrors(t *testing.T) {
	for _, c := range []struct {
		o    Optimizer
		want string
	}{
		{Adam{LR: 3e-4, Schedule: WarmupCosine{Warmup: 200, Total: 100}}, "WarmupCosine: warm-up 200, total 100: want 0 ≤ warm-up < total"},
		{AdamW{LR: 3e-4, Schedule: WarmupCosine{Warmup: 10, Total: 100, Min: 1e-3}}, "WarmupCosine: min 0.001: want in [0, lr 0.0003]"},
		{SGD{LR: 0.1, Schedule: StepLR{}}, "StepLR: step size 0"},
		{SGD{LR: 0.1, Schedule: MultiStepLR{Milestones: []int{30, 10}}}, "MultiStepLR: milestones [30 10]"},
		{SGD{LR: 0.1, Schedule: ExponentialLR{}}, "ExponentialLR: gamma 0"},
		{Adam{LR: 1e-3, Schedule: CosineAnnealingLR{}}, "CosineAnnealingLR: T_max 0"},
		{Adam{LR: 1e-3, Schedule: OneCycleLR{}}, "OneCycleLR: total steps 0"},
		{Adam{LR: 1e-3, Schedule: LinearLR{StartFactor: 2}}, "LinearLR: start factor 2"},
	} {
		m := NewModel("s")
		m.Optimizer(c.o) // the line the error names
		err := m.Err()
		if err == nil || !strings.Contains(err.Error(), "(dsl/schedule_test.go:") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%#v: err = %v, want the optimizer at dsl/schedule_test.go and %q", c.o, err, c.want)
		}
	}
}
