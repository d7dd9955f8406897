package dsl

import "github.com/ngen-ml/ngen/runtime/schedule"

// Schedule is a learning-rate schedule, set as an optimizer's Schedule:
// StepLR, MultiStepLR, ExponentialLR, ConstantLR, LinearLR,
// CosineAnnealingLR, OneCycleLR or WarmupCosine. Each is the PyTorch
// scheduler of its name applied to the optimizer's LR (its base_lr;
// OneCycleLR's max_lr), stepped after every optimizer step. The schedule
// is data in plan.json; the runtime evaluates it from the step counter
// (runtime/schedule), and Session.SetLR overrides it.
type Schedule interface{ schedule() schedule.Schedule }

// StepLR is torch.optim.lr_scheduler.StepLR: the rate times Gamma every
// StepSize steps. Zero Gamma takes PyTorch's default 0.1.
type StepLR struct {
	StepSize int
	Gamma    float64
}

// MultiStepLR is torch's MultiStepLR: the rate times Gamma at each
// milestone (increasing step counts). Zero Gamma takes 0.1.
type MultiStepLR struct {
	Milestones []int
	Gamma      float64
}

// ExponentialLR is torch's ExponentialLR: the rate times Gamma every step.
type ExponentialLR struct{ Gamma float64 }

// ConstantLR is torch's ConstantLR: the rate times Factor for the first
// Iters steps. Zero fields take PyTorch's defaults (1/3, 5).
type ConstantLR struct {
	Factor float64
	Iters  int
}

// LinearLR is torch's LinearLR, a linear warm-up (or decay): the factor
// goes from StartFactor to EndFactor over Iters steps, then stays. Zero
// fields take PyTorch's defaults (1/3, 1, 5), so an EndFactor of 0 cannot
// be written: decay to a small factor instead.
type LinearLR struct {
	StartFactor, EndFactor float64
	Iters                  int
}

// CosineAnnealingLR is torch's CosineAnnealingLR(T_max, eta_min): a
// half cosine from the rate down to EtaMin (absolute) over TMax steps,
// and, as in PyTorch, back up over the next TMax.
type CosineAnnealingLR struct {
	TMax   int
	EtaMin float64
}

// OneCycleLR is torch's OneCycleLR with max_lr the optimizer's LR and
// cycle_momentum=False (momentum and betas stay fixed). Zero fields take
// PyTorch's defaults (PctStart 0.3, DivFactor 25, FinalDivFactor 1e4,
// cosine annealing). Past TotalSteps, where PyTorch raises, the rate
// stays at its final value.
type OneCycleLR struct {
	TotalSteps                          int
	PctStart, DivFactor, FinalDivFactor float64
	LinearAnneal, ThreePhase            bool
}

// WarmupCosine warms up linearly for Warmup steps, then anneals along a
// half cosine to Min (absolute) at step Total, and stays at Min: PyTorch's
// SequentialLR([LinearLR(StartFactor, 1, Warmup),
// CosineAnnealingLR(Total-Warmup, Min)], [Warmup]) up to Total. Zero
// StartFactor takes 1/Warmup, so step t ≤ Warmup runs at LR·t/Warmup.
type WarmupCosine struct {
	Warmup, Total    int
	Min, StartFactor float64
}

func (s StepLR) schedule() schedule.Schedule {
	return schedule.Schedule{Kind: "step", StepSize: s.StepSize, Gamma: or(s.Gamma, 0.1)}
}

func (s MultiStepLR) schedule() schedule.Schedule {
	return schedule.Schedule{Kind: "multistep", Milestones: append([]int(nil), s.Milestones...), Gamma: or(s.Gamma, 0.1)}
}

func (s ExponentialLR) schedule() schedule.Schedule {
	return schedule.Schedule{Kind: "exponential", Gamma: s.Gamma}
}

func (s ConstantLR) schedule() schedule.Schedule {
	it := s.Iters
	if it == 0 {
		it = 5
	}
	return schedule.Schedule{Kind: "constant", Factor: or(s.Factor, 1.0/3), Iters: it}
}

func (s LinearLR) schedule() schedule.Schedule {
	it := s.Iters
	if it == 0 {
		it = 5
	}
	return schedule.Schedule{Kind: "linear", StartFactor: or(s.StartFactor, 1.0/3), EndFactor: or(s.EndFactor, 1), Iters: it}
}

func (s CosineAnnealingLR) schedule() schedule.Schedule {
	return schedule.Schedule{Kind: "cosine", TMax: s.TMax, Min: s.EtaMin}
}

func (s OneCycleLR) schedule() schedule.Schedule {
	return schedule.Schedule{Kind: "onecycle", Total: s.TotalSteps, PctStart: or(s.PctStart, 0.3),
		DivFactor: or(s.DivFactor, 25), FinalDivFactor: or(s.FinalDivFactor, 1e4), Linear: s.LinearAnneal, ThreePhase: s.ThreePhase}
}

func (s WarmupCosine) schedule() schedule.Schedule {
	sf := s.StartFactor
	if sf == 0 && s.Warmup > 0 {
		sf = 1 / float64(s.Warmup)
	}
	if s.Warmup == 0 {
		sf = 1 // no warm-up: the factor is never read
	}
	return schedule.Schedule{Kind: "warmup_cosine", Iters: s.Warmup, Total: s.Total, Min: s.Min, StartFactor: sf}
}

// or is x, or def when x is zero (PyTorch's default for a field left out).
func or(x, def float64) float64 {
	if x == 0 {
		return def
	}
	return x
}

// lowerSchedule is the optimizer's schedule as data, nil for none.
func lowerSchedule(s Schedule) *schedule.Schedule {
	if s == nil {
		return nil
	}
	sc := s.schedule()
	return &sc
}
