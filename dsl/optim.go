package dsl

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Optimizer is SGD, Adam or AdamW. Each takes an optional Schedule
// (schedule.go): LR is then the schedule's base rate; and an optional
// Clip of the gradients it reads (ClipGradValue).
type Optimizer interface{ lower() (ir.Optimizer, string) }

// SGD is torch.optim.SGD.
type SGD struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
	Schedule                             Schedule
	Clip                                 Clip
}

// Adam is torch.optim.Adam; zero Beta1, Beta2 and Eps take PyTorch's
// defaults (0.9, 0.999, 1e-8).
type Adam struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Schedule                           Schedule
	Clip                               Clip
}

// AdamW is torch.optim.AdamW; zero fields take PyTorch's defaults, with
// WeightDecay 1e-2 unless NoWeightDecay is set.
type AdamW struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	NoWeightDecay                      bool
	Schedule                           Schedule
	Clip                               Clip
}

func (o SGD) lower() (ir.Optimizer, string) {
	lo := ir.Optimizer{Kind: "sgd", LR: o.LR, Momentum: o.Momentum, Dampening: o.Dampening, Nesterov: o.Nesterov, WeightDecay: o.WeightDecay, Schedule: lowerSchedule(o.Schedule)}
	switch {
	case o.Nesterov && (o.Momentum <= 0 || o.Dampening != 0):
		return lo, "Nesterov momentum requires a momentum and zero dampening"
	case o.Momentum < 0:
		return lo, "momentum must be ≥ 0"
	}
	return lo, lowerClip(o.Clip, &lo)
}

func adamLike(kind string, lr, b1, b2, eps, wd float64) (ir.Optimizer, string) {
	if b1 == 0 {
		b1 = 0.9
	}
	if b2 == 0 {
		b2 = 0.999
	}
	if eps == 0 {
		eps = 1e-8
	}
	o := ir.Optimizer{Kind: kind, LR: lr, Beta1: b1, Beta2: b2, Eps: eps, WeightDecay: wd}
	if b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1 {
		return o, "betas must be in [0, 1)"
	}
	if eps < 0 {
		return o, "eps must be ≥ 0"
	}
	return o, ""
}

func (o Adam) lower() (ir.Optimizer, string) {
	lo, problem := adamLike("adam", o.LR, o.Beta1, o.Beta2, o.Eps, o.WeightDecay)
	lo.Schedule = lowerSchedule(o.Schedule)
	if problem == "" {
		problem = lowerClip(o.Clip, &lo)
	}
	return lo, problem
}

func (o AdamW) lower() (ir.Optimizer, string) {
	wd := o.WeightDecay
	if wd == 0 && !o.NoWeightDecay {
		wd = 1e-2
	}
	if o.NoWeightDecay {
		wd = 0
	}
	lo, problem := adamLike("adamw", o.LR, o.Beta1, o.Beta2, o.Eps, wd)
	lo.Schedule = lowerSchedule(o.Schedule)
	if problem == "" {
		problem = lowerClip(o.Clip, &lo)
	}
	return lo, problem
}

// Optimizer sets the optimizer.
func (m *Model) Optimizer(o Optimizer) {
	pos := callerPos()
	if o == nil {
		m.fail(pos, "optimizer", "nil optimizer")
		return
	}
	if m.m.Optimizer != nil {
		// The second call used to replace the first without a word.
		m.fail(pos, "optimizer", "the optimizer is already set: a model has one")
		return
	}
	lo, problem := o.lower()
	if !finite(lo.LR, lo.Momentum, lo.Dampening, lo.WeightDecay, lo.Beta1, lo.Beta2, lo.Eps) {
		problem = fmt.Sprintf("every argument must be a finite number, got lr %g, momentum %g, dampening %g, weight decay %g, betas (%g, %g), eps %g",
			lo.LR, lo.Momentum, lo.Dampening, lo.WeightDecay, lo.Beta1, lo.Beta2, lo.Eps)
	}
	if problem == "" && lo.LR <= 0 {
		problem = "learning rate must be positive"
	}
	if problem == "" && lo.WeightDecay < 0 {
		problem = "weight decay must be ≥ 0"
	}
	if problem == "" {
		problem = lo.Schedule.Check(lo.LR)
	}
	if problem != "" {
		m.fail(pos, lo.Kind, "%s", problem)
		return
	}
	m.m.Optimizer = &lo
}
