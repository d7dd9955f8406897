package dsl

import (
	"fmt"
	"path"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/runtime"
)

// Optimizer is SGD, Adam or AdamW. Each takes an optional Schedule
// (schedule.go): LR is then the schedule's base rate; an optional
// Clip of the gradients it reads (ClipGradValue); and optional parameter
// Groups with options of their own.
type Optimizer interface{ lower() (ir.Optimizer, string) }

// ParamGroup is one of an optimizer's parameter groups (torch.optim's
// param_groups). A parameter belongs to the first group one of whose
// patterns matches it; the parameters no group matches form the default
// group, with the optimizer's own options. Zero fields inherit the
// optimizer's value. A pattern that matches no parameter of the model,
// or a group every parameter of which an earlier group took, is an
// error at the Optimizer call.
//
// AdamW as GPT recipes use it, decay on the weight matrices only:
//
//	m.Optimizer(dsl.AdamW{LR: 3e-4, WeightDecay: 0.1, Groups: []dsl.ParamGroup{
//		{Kinds: []string{"*.bias", "layernorm.*", "embedding.*"}, NoWeightDecay: true},
//	}})
//
// A run-time weight decay (Session.SetWeightDecay, cmd/train
// -weight-decay) replaces the optimizer's and that of the groups that do
// not set their own (WeightDecay or NoWeightDecay); a group's own decay
// stays.
type ParamGroup struct {
	// Names are path.Match globs on parameter names ("*.bias",
	// "blocks_0.*"); '*' crosses the dots of a name.
	Names []string
	// Kinds are globs on the kind the declaring layer records, layer and
	// role: "param" (Model.Param), "linear.weight", "linear.bias",
	// "conv2d.weight", "conv2d.bias", "batchnorm.weight",
	// "batchnorm.bias", "layernorm.weight", "layernorm.bias",
	// "embedding.weight", "attention.weight", "attention.bias",
	// "rnn.weight", "rnn.bias".
	Kinds []string
	// LRScale multiplies the optimizer's base learning rate (1 when
	// zero). Under a schedule the group runs the schedule from its own
	// base rate, as a torch.optim.lr_scheduler steps each param_group from
	// its own initial_lr: for the multiplicative schedules (StepLR,
	// MultiStepLR, ExponentialLR, ConstantLR, LinearLR, OneCycleLR) that
	// is LRScale times the default group's rate; a cosine's floor
	// (CosineAnnealingLR's eta_min, WarmupCosine's Min) is absolute, the
	// same for every group, as eta_min is in PyTorch; OneCycleLR peaks at
	// each group's own rate, as PyTorch's OneCycleLR does with max_lr a
	// list of the groups' rates (a single max_lr would give every group
	// the same peak and drop the scales).
	LRScale       float64
	WeightDecay   float64
	NoWeightDecay bool
	// Beta1 and Beta2 are Adam's and AdamW's; Momentum is SGD's.
	Beta1, Beta2, Momentum float64
}

// SGD is torch.optim.SGD.
type SGD struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
	Schedule                             Schedule
	Clip                                 Clip
	Groups                               []ParamGroup
}

// Adam is torch.optim.Adam; zero Beta1, Beta2 and Eps take PyTorch's
// defaults (0.9, 0.999, 1e-8).
type Adam struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	Schedule                           Schedule
	Clip                               Clip
	Groups                             []ParamGroup
}

// AdamW is torch.optim.AdamW; zero fields take PyTorch's defaults, with
// WeightDecay 1e-2 unless NoWeightDecay is set.
type AdamW struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	NoWeightDecay                      bool
	Schedule                           Schedule
	Clip                               Clip
	Groups                             []ParamGroup
}

func (o SGD) lower() (ir.Optimizer, string) {
	lo := ir.Optimizer{Kind: "sgd", LR: o.LR, Momentum: o.Momentum, Dampening: o.Dampening, Nesterov: o.Nesterov, WeightDecay: o.WeightDecay, Schedule: lowerSchedule(o.Schedule)}
	switch {
	case o.Nesterov && (o.Momentum <= 0 || o.Dampening != 0):
		return lo, "Nesterov momentum requires a momentum and zero dampening"
	case o.Momentum < 0:
		return lo, "momentum must be ≥ 0"
	}
	if problem := lowerClip(o.Clip, &lo); problem != "" {
		return lo, problem
	}
	return lo, lowerGroups(o.Groups, &lo)
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
	if problem == "" {
		problem = lowerGroups(o.Groups, &lo)
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
	if o.NoWeightDecay && o.WeightDecay != 0 {
		// As for a ParamGroup: one of the two was meant, and the decay
		// used to be dropped without a word.
		problem = "NoWeightDecay with a WeightDecay"
	}
	if problem == "" {
		problem = lowerClip(o.Clip, &lo)
	}
	if problem == "" {
		problem = lowerGroups(o.Groups, &lo)
	}
	return lo, problem
}

// lowerGroups resolves the groups' options against the optimizer's and
// checks them; which parameters they take is the compiler's to find
// (compiler/optimizer_groups.go).
func lowerGroups(gs []ParamGroup, lo *ir.Optimizer) string {
	for i, g := range gs {
		where := fmt.Sprintf("parameter group %d: ", i)
		if !finite(g.LRScale, g.WeightDecay, g.Beta1, g.Beta2, g.Momentum) {
			return where + "every option must be a finite number"
		}
		if len(g.Names)+len(g.Kinds) == 0 {
			return where + "no Names or Kinds to select its parameters by"
		}
		for _, pat := range append(append([]string(nil), g.Names...), g.Kinds...) {
			if _, err := path.Match(pat, ""); err != nil {
				return fmt.Sprintf("%spattern %q: %v", where, pat, err)
			}
		}
		switch {
		case g.LRScale < 0:
			return where + "LRScale must be ≥ 0"
		case g.WeightDecay < 0:
			return where + "weight decay must be ≥ 0"
		case g.NoWeightDecay && g.WeightDecay != 0:
			return where + "NoWeightDecay with a WeightDecay"
		case g.Momentum < 0:
			return where + "momentum must be ≥ 0"
		case g.Beta1 < 0 || g.Beta1 >= 1 || g.Beta2 < 0 || g.Beta2 >= 1:
			return where + "betas must be in [0, 1)"
		case lo.Kind == "sgd" && (g.Beta1 != 0 || g.Beta2 != 0):
			return where + "betas are Adam's and AdamW's; SGD has Momentum"
		case lo.Kind != "sgd" && g.Momentum != 0:
			return where + "momentum is SGD's; " + lo.Kind + " has Beta1 and Beta2"
		}
		rg := ir.ParamGroup{Names: g.Names, Kinds: g.Kinds, LRScale: g.LRScale, WeightDecay: lo.WeightDecay,
			Beta1: lo.Beta1, Beta2: lo.Beta2, Momentum: lo.Momentum}
		if rg.LRScale == 0 {
			rg.LRScale = 1
		}
		if g.WeightDecay != 0 || g.NoWeightDecay {
			rg.WeightDecay, rg.OwnDecay = g.WeightDecay, true
		}
		if g.Beta1 != 0 {
			rg.Beta1 = g.Beta1
		}
		if g.Beta2 != 0 {
			rg.Beta2 = g.Beta2
		}
		if g.Momentum != 0 {
			rg.Momentum = g.Momentum
		}
		lo.Groups = append(lo.Groups, rg)
	}
	return ""
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
	lo.Pos = pos
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
	// Every session refuses a rate above runtime.MaxLR: say so here, not
	// at New after a build that succeeded.
	if problem == "" && lo.LR > runtime.MaxLR {
		problem = fmt.Sprintf("learning rate %g exceeds runtime.MaxLR (%g)", lo.LR, runtime.MaxLR)
	}
	for i, g := range lo.Groups {
		if problem == "" && lo.LR*g.LRScale > runtime.MaxLR {
			problem = fmt.Sprintf("parameter group %d: learning rate %g × LRScale %g exceeds runtime.MaxLR (%g)", i, lo.LR, g.LRScale, runtime.MaxLR)
		}
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
