package schedule_test

import (
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// oracleCases are one schedule of every kind, with parameters that make
// 2,000 steps cross their interesting points: StepLR's and MultiStepLR's
// drops, CosineAnnealingLR past T_max (PyTorch's is periodic), the
// warm-up's end, each OneCycleLR phase.
var oracleCases = []schedule.Schedule{
	{Kind: "step", StepSize: 300, Gamma: 0.5},
	{Kind: "multistep", Milestones: []int{100, 700, 1500}, Gamma: 0.3},
	{Kind: "exponential", Gamma: 0.998},
	{Kind: "constant", Factor: 0.25, Iters: 120},
	{Kind: "linear", StartFactor: 0.01, EndFactor: 1, Iters: 250},
	{Kind: "linear", StartFactor: 1, EndFactor: 0.1, Iters: 1800},
	{Kind: "cosine", TMax: 700, Min: 1e-5},
	{Kind: "cosine", TMax: 2000},
	{Kind: "warmup_cosine", Iters: 200, Total: 2000, Min: 3e-5, StartFactor: 0.001},
	{Kind: "warmup_cosine", Total: 2000, Min: 3e-5, StartFactor: 1},
	{Kind: "onecycle", Total: 2000, PctStart: 0.3, DivFactor: 25, FinalDivFactor: 1e4},
	{Kind: "onecycle", Total: 2000, PctStart: 0.25, DivFactor: 10, FinalDivFactor: 100, Linear: true, ThreePhase: true},
}

// TestRatesMatchTorch compares 2,000 steps of every kind with
// torch.optim.lr_scheduler (testdata/oracle/torch_lr.py).
func TestRatesMatchTorch(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	const base, steps = 3e-4, 2000
	var res struct{ Rates [][]float64 }
	req := map[string]any{"lr": base, "steps": steps, "schedules": oracleCases}
	if err := oracle.RunScript("torch_lr.py", req, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Rates) != len(oracleCases) {
		t.Fatalf("%d answers for %d schedules", len(res.Rates), len(oracleCases))
	}
	for i, s := range oracleCases {
		want := res.Rates[i]
		if len(want) != steps {
			t.Fatalf("%s: %d rates, want %d", s.String(), len(want), steps)
		}
		got := make([]float64, steps)
		for e := range got {
			got[e] = s.Rate(base, e)
		}
		// PyTorch's recursive forms (StepLR, ExponentialLR, the cosine's
		// ratio of cosines) and ngen's closed forms round differently:
		// rtol 1e-7, what the schedule promises, with no absolute slack.
		if m := oracle.Mismatch(got, want, 1e-7, 0); m != "" {
			t.Errorf("%s: %s", s.String(), m)
		}
	}
}

// TestRateEnds checks what PyTorch does not define: a warm-up cosine
// holds its floor after its total, a one-cycle its final rate after its
// total steps (where OneCycleLR raises).
func TestRateEnds(t *testing.T) {
	wc := schedule.Schedule{Kind: "warmup_cosine", Iters: 10, Total: 100, Min: 1e-3, StartFactor: 0.1}
	for _, e := range []int{100, 101, 150, 1 << 20} {
		if r := wc.Rate(0.1, e); r != 1e-3 {
			t.Errorf("warm-up cosine at %d: %g, want the floor 1e-3", e, r)
		}
	}
	oc := schedule.Schedule{Kind: "onecycle", Total: 100, PctStart: 0.3, DivFactor: 25, FinalDivFactor: 1e4}
	if r, want := oc.Rate(1, 5000), 1/25.0/1e4; r != want {
		t.Errorf("one-cycle past its total: %g, want %g", r, want)
	}
	var none *schedule.Schedule
	if r := none.Rate(0.5, 1234); r != 0.5 {
		t.Errorf("no schedule: %g, want the base rate", r)
	}
}

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		s    schedule.Schedule
		want string
	}{
		{schedule.Schedule{Kind: "warmup_cosine", Iters: 200, Total: 100, StartFactor: 0.1}, "want 0 ≤ warm-up < total"},
		{schedule.Schedule{Kind: "warmup_cosine", Iters: 10, Total: 100}, "start factor 0"},
		{schedule.Schedule{Kind: "warmup_cosine", Iters: 10, Total: 100, StartFactor: 0.1, Min: 1}, "min 1"},
		{schedule.Schedule{Kind: "step", Gamma: 0.1}, "step size 0"},
		{schedule.Schedule{Kind: "step", StepSize: 3, Gamma: 2}, "gamma 2"},
		{schedule.Schedule{Kind: "multistep", Milestones: []int{5, 5}, Gamma: 0.1}, "increasing"},
		{schedule.Schedule{Kind: "exponential", Gamma: math.NaN()}, "finite"},
		{schedule.Schedule{Kind: "cosine"}, "T_max 0"},
		{schedule.Schedule{Kind: "onecycle", Total: 3, PctStart: 0.3, DivFactor: 25, FinalDivFactor: 1e4}, "less than one step"},
		{schedule.Schedule{Kind: "onecycle", Total: 100, PctStart: 1, DivFactor: 25, FinalDivFactor: 1e4}, "pct_start 1"},
		{schedule.Schedule{Kind: "polynomial"}, `unknown schedule kind "polynomial"`},
	} {
		if got := c.s.Check(0.1); !strings.Contains(got, c.want) {
			t.Errorf("%+v: %q, want it to say %q", c.s, got, c.want)
		}
	}
	for _, s := range oracleCases {
		if p := s.Check(3e-4); p != "" {
			t.Errorf("%s: %s", s.String(), p)
		}
	}
}
