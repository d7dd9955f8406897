package jit

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// The update check (issue 27, compiler/guard.go, codegen/guard.go): a step
// whose loss and gradients are finite but whose optimizer update would
// make a parameter or the optimizer's state non-finite is a failed step
// that changes nothing. Before, SetLR(3.4e38) or a huge input made the
// next Step return nil and leave every parameter non-finite.

// snapshot reads every parameter and state buffer (optimizer moments,
// running statistics) and the step count.
func snapshot(t *testing.T, s *runtime.Session) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{"steps": {float64(s.Steps())}}
	for _, role := range []string{"param", "state"} {
		for _, n := range s.Names(role) {
			i, err := s.Lookup(role, n)
			if err != nil {
				t.Fatal(err)
			}
			v, err := s.ReadFloats(i)
			if err != nil {
				t.Fatal(err)
			}
			out[role+":"+n] = v
		}
	}
	return out
}

func sameSnapshot(t *testing.T, what string, got, want map[string][]float64) {
	t.Helper()
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			t.Fatalf("%s: %s changed: %v → %v", what, k, w, got[k])
		}
	}
}

func finiteSnapshot(t *testing.T, what string, got map[string][]float64) {
	t.Helper()
	for k, v := range got {
		for i, x := range v {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				t.Fatalf("%s: %s[%d] = %v", what, k, i, x)
			}
		}
	}
}

func updateOptimizers() []ir.Optimizer {
	return []ir.Optimizer{
		irtest.Adam,
		{Kind: "adamw", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01},
		{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1},
		{Kind: "sgd", LR: 0.1},
		{Kind: "sgd", LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-4},
		{Kind: "sgd", LR: 0.1, Momentum: 0.9, Dampening: 0.1},
		// Parameter groups: one loop per group, each with its options;
		// momentum in one group only.
		{Kind: "adamw", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Groups: []ir.ParamGroup{
			{Names: []string{"*.bias"}, LRScale: 1, OwnDecay: true, Beta1: 0.5, Beta2: 0.9}}},
		{Kind: "sgd", LR: 0.1, Groups: []ir.ParamGroup{{Names: []string{"fc2.*"}, LRScale: 2, Momentum: 0.9}}},
	}
}

func wantUpdateError(t *testing.T, what string, err error) {
	t.Helper()
	var ue *runtime.UpdateError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "would make a parameter or the optimizer's state non-finite; the step changed nothing") {
		t.Fatalf("%s: err = %v, want a *runtime.UpdateError", what, err)
	}
}

// TestUpdateCheck: per optimizer, fused and unfused, f32 and f64: an input
// of 1e36 (f32) or 1e305 (f64) gives finite loss and gradients whose
// update overflows (Adam's g², SGD's lr·g at lr 1e4); the step fails with
// an UpdateError and changes nothing, and the next ordinary step trains.
func TestUpdateCheck(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	type config struct {
		dt   ir.DType
		opt  ir.Optimizer
		fuse bool
	}
	// Every optimizer form fused in f32; the unfused update (one kernel
	// per op) and f64 for Adam and SGD with momentum: each case is a
	// model compiled at run time.
	var cases []config
	for i, opt := range updateOptimizers() {
		cases = append(cases, config{ir.F32, opt, true})
		if i == 0 || i == 4 || i == 6 {
			cases = append(cases, config{ir.F32, opt, false}, config{ir.F64, opt, true})
		}
	}
	for _, c := range cases {
		dt, opt, fuse := c.dt, c.opt, c.fuse
		what := fmt.Sprintf("%s/%s%v/fuse=%v", dt, opt.Kind, opt, fuse)
		p, err := compiler.Compile(irtest.MLP(dt, 4, 5, 3, 0, opt), compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 2, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		// An input whose gradients (about v/2) are finite but
		// whose update is not: (v/2)² overflows, and so does
		// lr·v/2 at lr 1e4.
		huge := 1e36
		if dt == ir.F64 {
			huge = 1e305
		}
		run := func(v float64) error {
			xs, y := []float64{v, 0, 0, 0, v, 0, 0, 0}, []int32{0, 2}
			if err := s.WriteInput("x", castTo(dt, xs), 2); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteInput("y", y, 2); err != nil {
				t.Fatal(err)
			}
			return s.Run("step", 2)
		}
		if err := run(1); err != nil { // moments non-zero
			t.Fatalf("%s: %v", what, err)
		}
		before := snapshot(t, s)
		if err := s.SetLR(1e4); err != nil {
			t.Fatal(err)
		}
		if s.UpdateCheckFull() {
			t.Fatalf("%s: an ordinary step's update was checked element by element: the bound should cover it", what)
		}
		wantUpdateError(t, what, run(huge))
		if !s.UpdateCheckFull() {
			t.Fatalf("%s: the failed step's update was not checked element by element", what)
		}
		if l, err := s.StepLoss(); err != nil || math.IsNaN(l) || math.IsInf(l, 0) {
			t.Fatalf("%s: the loss %v should be finite (%v)", what, l, err)
		}
		sameSnapshot(t, what, snapshot(t, s), before)
		if err := s.SetLR(opt.LR); err != nil {
			t.Fatal(err)
		}
		if err := run(1); err != nil {
			t.Fatalf("%s: the step after a failed update: %v", what, err)
		}
		after := snapshot(t, s)
		finiteSnapshot(t, what, after)
		if after["steps"][0] != 2 || slices.Equal(after["param:fc1.weight"], before["param:fc1.weight"]) {
			t.Fatalf("%s: the next step did not train (%v steps)", what, after["steps"])
		}
		s.Close()
	}
}

func castTo(dt ir.DType, xs []float64) any {
	if dt == ir.F64 {
		return xs
	}
	out := make([]float32, len(xs))
	for i, v := range xs {
		out[i] = float32(v)
	}
	return out
}

// TestAccumulatedUpdateCheck: three micro-batches whose gradients are
// finite (2e38 in f32) but whose sum overflows. Each passes the
// guard; the update of their mean fails (Run("step") and RunUpdate), the
// parameters, optimizer state and step count are as before, and the
// micro-batches are dropped.
func TestAccumulatedUpdateCheck(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, opt := range []ir.Optimizer{irtest.Adam, {Kind: "sgd", LR: 0.1, Momentum: 0.9}} {
		for _, fuse := range []bool{true, false} {
			what := fmt.Sprintf("%s/fuse=%v", opt.Kind, fuse)
			b := irtest.New()
			x := b.Input("x", ir.F32, ir.S("B"), ir.D(4))
			y := b.Input("y", ir.I32, ir.S("B"))
			logits := b.Linear("fc", x, 3)
			p, err := compiler.Compile(b.Model("linear", b.Binary("cross_entropy", logits, y), logits, opt), compiler.Options{Fuse: fuse})
			if err != nil {
				t.Fatal(err)
			}
			s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 1, Seed: 3, AccumulationSteps: 3})
			if err != nil {
				t.Fatal(err)
			}
			// One row x = (v, 0, 0, 0) with the label of the smallest
			// weight in column 0: the logits (at most v/2) and the loss
			// stay finite, the gradient of fc.weight's column 0 is -v for
			// the label's row and about v for the largest weight's.
			label := int32(0)
			smallest := func() {
				wi, _ := s.Lookup("param", "fc.weight")
				w, _ := s.ReadFloats(wi)
				for k := 1; k < 3; k++ {
					if w[4*k] < w[4*label] {
						label = int32(k)
					}
				}
			}
			micro := func(v float32, update bool) error {
				if err := s.WriteInput("x", []float32{v, 0, 0, 0}, 1); err != nil {
					t.Fatal(err)
				}
				if err := s.WriteInput("y", []int32{label}, 1); err != nil {
					t.Fatal(err)
				}
				if update {
					return s.Run("step", 1)
				}
				return s.RunGrads(1)
			}
			for i := 0; i < 3; i++ {
				if err := micro(1, true); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, s)
			smallest()
			// Gradients of 2e38: three of them overflow f32.
			for i := 0; i < 2; i++ {
				if err := micro(2e38, true); err != nil {
					t.Fatalf("%s: micro-batch %d: %v", what, i, err)
				}
			}
			err = micro(2e38, true)
			if err == nil {
				t.Fatalf("%s: the third micro-batch updated: %v", what, snapshot(t, s)["param:fc.weight"])
			}
			wantUpdateError(t, what+" step", err)
			if s.Pending() != 0 {
				t.Fatalf("%s: %d micro-batches still pending", what, s.Pending())
			}
			sameSnapshot(t, what, snapshot(t, s), before)
			for i := 0; i < 3; i++ {
				if err := micro(2e38, false); err != nil {
					t.Fatalf("%s: RunGrads %d: %v", what, i, err)
				}
			}
			wantUpdateError(t, what+" RunUpdate", s.RunUpdate())
			sameSnapshot(t, what+" RunUpdate", snapshot(t, s), before)
			for i := 0; i < 3; i++ {
				if err := micro(1, true); err != nil {
					t.Fatalf("%s: after the failed updates: %v", what, err)
				}
			}
			finiteSnapshot(t, what, snapshot(t, s))
			if s.Steps() != 2 {
				t.Fatalf("%s: %d steps, want 2", what, s.Steps())
			}
			s.Close()
		}
	}
}

// TestSetLRBound: SetLR takes finite rates in [0, runtime.MaxLR] and
// leaves the rate alone otherwise.
func TestSetLRBound(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	p, err := compiler.Compile(irtest.MLP(ir.F32, 4, 5, 3, 0, irtest.Adam), compiler.Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 2, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, lr := range []float64{math.NaN(), math.Inf(1), -1e-3, 3.4e38, 1e300, runtime.MaxLR * 1.0000001} {
		if err := s.SetLR(lr); err == nil || !strings.Contains(err.Error(), "runtime.MaxLR") {
			t.Errorf("SetLR(%v): %v", lr, err)
		}
		if s.LR() != irtest.Adam.LR {
			t.Fatalf("SetLR(%v) changed the rate to %v", lr, s.LR())
		}
	}
	for _, lr := range []float64{0, 1e-3, runtime.MaxLR} {
		if err := s.SetLR(lr); err != nil || s.LR() != lr {
			t.Errorf("SetLR(%v): %v, rate %v", lr, err, s.LR())
		}
	}
}

// TestGuardStepNumbers: a failed step's error names the step that failed,
// counted from 1: the third step after two good ones, whether the update
// phase had counted it (a plain step, an update) or not (a micro-batch of
// an accumulation), and an UpdateError names that step and its rate.
func TestGuardStepNumbers(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	sgd := ir.Optimizer{Kind: "sgd", LR: 0.1}
	p, err := compiler.Compile(irtest.MLP(ir.F32, 4, 5, 3, 0, sgd), compiler.Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{1, 2} {
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 2, Seed: 3, AccumulationSteps: k})
		if err != nil {
			t.Fatal(err)
		}
		run := func(v float64) error {
			if err := s.WriteInput("x", castTo(ir.F32, []float64{v, 0, 0, 0, v, 0, 0, 0}), 2); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteInput("y", []int32{0, 2}, 2); err != nil {
				t.Fatal(err)
			}
			return s.Run("step", 2)
		}
		for range 2 * k {
			if err := run(1); err != nil {
				t.Fatal(err)
			}
		}
		// A NaN input passes no check before the step (training inputs
		// are not scanned); the loss is NaN.
		if err := run(math.NaN()); err == nil || !strings.Contains(err.Error(), "loss is NaN at step 3;") {
			t.Errorf("k=%d: NaN loss after 2 steps: %v, want step 3", k, err)
		}
		if k == 1 {
			if err := s.SetLR(1e4); err != nil {
				t.Fatal(err)
			}
			err := run(1e36)
			var ue *runtime.UpdateError
			if !errors.As(err, &ue) || ue.Step != 3 || ue.LR != 1e4 {
				t.Errorf("overflowing update after 2 steps: %v, want an UpdateError of step 3 at rate 1e4", err)
			}
		}
		if s.Steps() != 2 {
			t.Errorf("k=%d: %d steps after the failures, want 2", k, s.Steps())
		}
		s.Close()
	}
}
