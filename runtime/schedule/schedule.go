// Package schedule holds learning-rate schedules as data: what the DSL
// declares (dsl.StepLR, dsl.WarmupCosine, ...), what plan.json and
// checkpoints carry, and what the runtime evaluates from the optimizer's
// step counter before each update. Each kind is one of PyTorch's
// torch.optim.lr_scheduler classes (or a fixed composition of them), and
// Rate returns the rate that class gives, in float64, to rounding.
//
// Rate is the reference: the device computes the same rate from its step
// counter in the clock kernel (runtime/clock.go, codegen/clock.go, a C
// port of Rate that TestClockSchedules holds to it), and the host uses
// Rate for LR() and its own mirror of the step's scalars.
package schedule

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Schedule is one learning-rate schedule. Rates are multiples of the
// optimizer's rate (PyTorch's base_lr, the group's initial_lr), except
// the floors Min, which are absolute as PyTorch's eta_min is. Epoch e
// counts completed optimizer steps: step t (from 1) runs at Rate(base,
// t-1), as a PyTorch loop that calls scheduler.step() after each
// optimizer.step().
type Schedule struct {
	// Kind is one of Kinds.
	Kind string `json:"kind"`
	// StepSize: step (StepLR.step_size).
	StepSize int `json:"step_size,omitzero"`
	// Milestones: multistep (MultiStepLR.milestones), increasing.
	Milestones []int `json:"milestones,omitzero"`
	// Gamma: step, multistep, exponential.
	Gamma float64 `json:"gamma,omitzero"`
	// Factor: constant (ConstantLR.factor).
	Factor float64 `json:"factor,omitzero"`
	// StartFactor, EndFactor: linear (LinearLR); StartFactor also
	// warmup_cosine's first warm-up factor.
	StartFactor float64 `json:"start_factor,omitzero"`
	EndFactor   float64 `json:"end_factor,omitzero"`
	// Iters: linear and constant (total_iters), warmup_cosine (warm-up
	// steps).
	Iters int `json:"iters,omitzero"`
	// TMax: cosine (CosineAnnealingLR.T_max).
	TMax int `json:"t_max,omitzero"`
	// Min: cosine (eta_min) and warmup_cosine (the final rate), absolute.
	Min float64 `json:"min,omitzero"`
	// Total: onecycle (total_steps), warmup_cosine (warm-up included).
	Total int `json:"total,omitzero"`
	// PctStart, DivFactor, FinalDivFactor, Linear (anneal_strategy
	// "linear" instead of "cos"), ThreePhase: onecycle (OneCycleLR with
	// max_lr the optimizer's rate and cycle_momentum=False).
	PctStart       float64 `json:"pct_start,omitzero"`
	DivFactor      float64 `json:"div_factor,omitzero"`
	FinalDivFactor float64 `json:"final_div_factor,omitzero"`
	Linear         bool    `json:"linear,omitzero"`
	ThreePhase     bool    `json:"three_phase,omitzero"`
}

// MaxMilestones bounds a multistep schedule's milestones: the device
// clock holds them (runtime/clock.go).
const MaxMilestones = 64

// Kinds lists the schedule kinds with the PyTorch scheduler each one is.
var Kinds = map[string]string{
	"step":          "StepLR(step_size, gamma)",
	"multistep":     "MultiStepLR(milestones, gamma)",
	"exponential":   "ExponentialLR(gamma)",
	"constant":      "ConstantLR(factor, total_iters)",
	"linear":        "LinearLR(start_factor, end_factor, total_iters)",
	"cosine":        "CosineAnnealingLR(T_max, eta_min)",
	"onecycle":      "OneCycleLR(max_lr=lr, total_steps, pct_start, anneal_strategy, div_factor, final_div_factor, three_phase, cycle_momentum=False)",
	"warmup_cosine": "SequentialLR([LinearLR(start_factor, 1, warmup), CosineAnnealingLR(total-warmup, min)], [warmup]), then min",
}

// Rate is the learning rate after e completed steps for an optimizer
// whose own rate is base.
func (s *Schedule) Rate(base float64, e int) float64 {
	if s == nil {
		return base
	}
	if e < 0 {
		e = 0
	}
	x := float64(e)
	switch s.Kind {
	case "step":
		return base * math.Pow(s.Gamma, float64(e/s.StepSize))
	case "multistep":
		k := 0
		for _, m := range s.Milestones {
			if e >= m {
				k++
			}
		}
		return base * math.Pow(s.Gamma, float64(k))
	case "exponential":
		return base * math.Pow(s.Gamma, x)
	case "constant":
		if e >= s.Iters {
			return base
		}
		return base * s.Factor
	case "linear":
		return base * (s.StartFactor + (s.EndFactor-s.StartFactor)*float64(min(s.Iters, e))/float64(s.Iters))
	case "cosine":
		return cosine(base, s.Min, x, float64(s.TMax))
	case "onecycle":
		return s.oneCycle(base, e)
	case "warmup_cosine":
		switch {
		case e < s.Iters:
			return base * (s.StartFactor + (1-s.StartFactor)*x/float64(s.Iters))
		case e >= s.Total:
			return s.Min
		}
		return cosine(base, s.Min, float64(e-s.Iters), float64(s.Total-s.Iters))
	}
	panic("schedule: unknown kind " + s.Kind) // Check refuses it first
}

// cosine is CosineAnnealingLR's closed form (PyTorch's recursive form
// equals it to rounding, periodic with period 2·T_max).
func cosine(base, min, e, tmax float64) float64 {
	return min + (base-min)*(1+math.Cos(math.Pi*e/tmax))/2
}

// oneCycle is OneCycleLR.get_lr. Past total_steps, where PyTorch raises,
// the rate stays at the final one (max_lr / div_factor /
// final_div_factor).
func (s *Schedule) oneCycle(maxLR float64, e int) float64 {
	initial := maxLR / s.DivFactor
	final := initial / s.FinalDivFactor
	if e > s.Total {
		return final
	}
	type phase struct{ end, from, to float64 }
	T := float64(s.Total)
	phases := []phase{{s.PctStart*T - 1, initial, maxLR}, {T - 1, maxLR, final}}
	if s.ThreePhase {
		phases = []phase{{s.PctStart*T - 1, initial, maxLR}, {2*s.PctStart*T - 2, maxLR, initial}, {T - 1, initial, final}}
	}
	x, start := float64(e), 0.0
	for i, p := range phases {
		if x <= p.end || i == len(phases)-1 {
			pct := (x - start) / (p.end - start)
			if s.Linear {
				return (p.to-p.from)*pct + p.from
			}
			return p.to + (p.from-p.to)/2*(math.Cos(math.Pi*pct)+1)
		}
		start = p.end
	}
	panic("unreachable")
}

// Check says what is wrong with the schedule for an optimizer of rate
// base, or "" when nothing is.
func (s *Schedule) Check(base float64) string {
	if s == nil {
		return ""
	}
	if _, ok := Kinds[s.Kind]; !ok {
		return fmt.Sprintf("unknown schedule kind %q (want one of %s)", s.Kind, kindList())
	}
	for _, x := range []float64{s.Gamma, s.Factor, s.StartFactor, s.EndFactor, s.Min, s.PctStart, s.DivFactor, s.FinalDivFactor} {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Sprintf("every number of a %s schedule must be finite: %+v", s.Kind, *s)
		}
	}
	switch s.Kind {
	case "step":
		if s.StepSize <= 0 {
			return fmt.Sprintf("StepLR: step size %d: want ≥ 1", s.StepSize)
		}
	case "multistep":
		if len(s.Milestones) == 0 {
			return "MultiStepLR: no milestones"
		}
		if len(s.Milestones) > MaxMilestones {
			return fmt.Sprintf("MultiStepLR: %d milestones: at most %d", len(s.Milestones), MaxMilestones)
		}
		for i, m := range s.Milestones {
			if m <= 0 || i > 0 && m <= s.Milestones[i-1] {
				return fmt.Sprintf("MultiStepLR: milestones %v: want positive and increasing", s.Milestones)
			}
		}
	case "constant":
		if s.Factor <= 0 || s.Factor > 1 || s.Iters < 0 {
			return fmt.Sprintf("ConstantLR: factor %g, iters %d: want a factor in (0, 1] and iters ≥ 0", s.Factor, s.Iters)
		}
	case "linear":
		if s.StartFactor <= 0 || s.StartFactor > 1 || s.EndFactor < 0 || s.EndFactor > 1 || s.Iters <= 0 {
			return fmt.Sprintf("LinearLR: start factor %g, end factor %g, iters %d: want a start factor in (0, 1], an end factor in [0, 1] and iters ≥ 1", s.StartFactor, s.EndFactor, s.Iters)
		}
	case "cosine":
		if s.TMax <= 0 {
			return fmt.Sprintf("CosineAnnealingLR: T_max %d: want ≥ 1", s.TMax)
		}
		if s.Min < 0 || s.Min > base {
			return fmt.Sprintf("CosineAnnealingLR: eta_min %g: want in [0, lr %g]", s.Min, base)
		}
	case "warmup_cosine":
		if s.Iters < 0 || s.Total <= s.Iters {
			return fmt.Sprintf("WarmupCosine: warm-up %d, total %d: want 0 ≤ warm-up < total", s.Iters, s.Total)
		}
		if s.StartFactor <= 0 || s.StartFactor > 1 {
			return fmt.Sprintf("WarmupCosine: start factor %g: want in (0, 1]", s.StartFactor)
		}
		if s.Min < 0 || s.Min > base {
			return fmt.Sprintf("WarmupCosine: min %g: want in [0, lr %g]", s.Min, base)
		}
	case "onecycle":
		if s.Total <= 0 {
			return fmt.Sprintf("OneCycleLR: total steps %d: want ≥ 1", s.Total)
		}
		if s.PctStart <= 0 || s.PctStart >= 1 || s.DivFactor <= 0 || s.FinalDivFactor <= 0 {
			return fmt.Sprintf("OneCycleLR: pct_start %g, div_factor %g, final_div_factor %g: want pct_start in (0, 1) and positive factors", s.PctStart, s.DivFactor, s.FinalDivFactor)
		}
		// A phase shorter than a step divides by zero in PyTorch too.
		n := 2.0
		if s.ThreePhase {
			n = 3
		}
		if p := s.PctStart * float64(s.Total); p-1 <= 0 || float64(s.Total)-1-(n-1)*(p-1) <= 0 {
			return fmt.Sprintf("OneCycleLR: total steps %d with pct_start %g leave a phase of less than one step", s.Total, s.PctStart)
		}
	}
	switch s.Kind {
	case "step", "multistep", "exponential":
		if s.Gamma <= 0 || s.Gamma > 1 {
			return fmt.Sprintf("%s: gamma %g: want in (0, 1]", Kinds[s.Kind][:strings.Index(Kinds[s.Kind], "(")], s.Gamma)
		}
	}
	return ""
}

func kindList() string {
	var ks []string
	for k := range Kinds {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// String is the schedule in PyTorch's terms, for logs.
func (s *Schedule) String() string {
	if s == nil {
		return "constant"
	}
	switch s.Kind {
	case "step":
		return fmt.Sprintf("StepLR(step_size=%d, gamma=%g)", s.StepSize, s.Gamma)
	case "multistep":
		return fmt.Sprintf("MultiStepLR(milestones=%v, gamma=%g)", s.Milestones, s.Gamma)
	case "exponential":
		return fmt.Sprintf("ExponentialLR(gamma=%g)", s.Gamma)
	case "constant":
		return fmt.Sprintf("ConstantLR(factor=%g, total_iters=%d)", s.Factor, s.Iters)
	case "linear":
		return fmt.Sprintf("LinearLR(start_factor=%g, end_factor=%g, total_iters=%d)", s.StartFactor, s.EndFactor, s.Iters)
	case "cosine":
		return fmt.Sprintf("CosineAnnealingLR(T_max=%d, eta_min=%g)", s.TMax, s.Min)
	case "onecycle":
		a := "cos"
		if s.Linear {
			a = "linear"
		}
		return fmt.Sprintf("OneCycleLR(total_steps=%d, pct_start=%g, anneal_strategy=%s, div_factor=%g, final_div_factor=%g, three_phase=%v)", s.Total, s.PctStart, a, s.DivFactor, s.FinalDivFactor, s.ThreePhase)
	case "warmup_cosine":
		return fmt.Sprintf("WarmupCosine(warmup=%d, total=%d, min=%g, start_factor=%g)", s.Iters, s.Total, s.Min, s.StartFactor)
	}
	return s.Kind
}
