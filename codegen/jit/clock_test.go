package jit

import (
	"math"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// TestClockOptimizers trains under a schedule with each optimizer the
// clock kernel computes scalars for, with parameter groups (their own
// rates, betas, momentum and decay), and after every step compares the
// next step's scalars in the device clock (runtime/clock.go) with the
// host's Optimizer.ScalarsAt: AdamW's decay per group, SGD's momentum
// and dampening from the second step on, a run-time weight decay. The
// seed MLP's Adam is runtime's TestClockMatchesHost.
func TestClockOptimizers(t *testing.T) {
	sgd := ir.Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.9, Dampening: 0.1, Nesterov: false, WeightDecay: 1e-3, Groups: []ir.ParamGroup{
		{Names: []string{"*.bias"}, LRScale: 0.5, OwnDecay: true},
		{Names: []string{"out.*"}, LRScale: 2, Momentum: 0.5, WeightDecay: 1e-3},
	}}
	for _, opt := range []ir.Optimizer{groupedAdamW, sgd} {
		t.Run(opt.Kind, func(t *testing.T) {
			r := newScheduleRig(t, opt, schedule.Schedule{Kind: "warmup_cosine", Iters: 3, Total: 9, Min: 1e-4, StartFactor: 0.1})
			s := r.session(r.sched)
			o := s.Plan().Optimizer
			check := func(when string) {
				t.Helper()
				clk, err := s.ReadClock()
				if err != nil {
					t.Fatal(err)
				}
				want := o.ScalarsAt(map[string]float64{}, o.Rules(), s.Steps()+1, s.ScheduleSteps()+1, r.base, &r.sc, s.WeightDecay())
				if len(want) < 4*len(o.Rules()) {
					t.Fatalf("%d scalars for %d groups", len(want), len(o.Rules()))
				}
				for name, w := range want {
					i := runtime.ClockSlot(o, name)
					if i < 0 || !(math.Abs(clk[i]-w) <= 1e-13*math.Abs(w)) {
						t.Fatalf("%s: %s is %v on the device (slot %d), %v on the host", when, name, clk[max(i, 0)], i, w)
					}
				}
			}
			check("after New")
			for step := range 12 {
				r.steps(s, 1, nil)
				if step == 4 {
					if err := s.SetWeightDecay(0.02); err != nil {
						t.Fatal(err)
					}
				}
				check("after a step")
			}
		})
	}
}
