package runtime

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"

	"github.com/ngen-ml/ngen/runtime/schedule"
)

// Parameter groups (torch.optim's param_groups). The compiler lays each
// declared group's parameters out contiguously in the flat vectors, in
// declaration order, with the default group (the parameters no group
// matched) last, and lowers one update per group over its slice
// (compiler/optimizer.go). A group's per-step scalars carry its suffix
// (GroupRule.Suffix): lr_g0, step_size_g0, decay_g0, wd_g0, mom_g0.

// ParamGroup is one declared group of a plan's optimizer, its options
// resolved (what the user left unset holds the optimizer's value).
type ParamGroup struct {
	Params      []string `json:",omitzero"` // members, in layout order
	LRScale     float64  `json:",omitzero"` // times the (scheduled) learning rate
	WeightDecay float64  `json:",omitzero"`
	// OwnDecay says the group set its own decay, which SetWeightDecay
	// leaves alone; a group without one follows the default group's.
	OwnDecay bool    `json:",omitzero"`
	Beta1    float64 `json:",omitzero"`
	Beta2    float64 `json:",omitzero"`
	Momentum float64 `json:",omitzero"`
	// Offset and Elems are the group's slice of the flat vectors.
	Offset int64 `json:",omitzero"`
	Elems  int64 `json:",omitzero"`
}

// GroupRule is one group's update options as the kernels use them.
type GroupRule struct {
	Suffix      string // of its scalars' names: "" for the default group
	LRScale     float64
	WeightDecay float64 // compile-time value; see OwnDecay
	OwnDecay    bool
	Beta1       float64
	Beta2       float64
	Momentum    float64
}

// GroupSuffix is the scalar-name suffix of declared group i.
func GroupSuffix(i int) string { return fmt.Sprintf("_g%d", i) }

// Rules lists the groups' update options: the declared groups, then the
// default group.
func (o Optimizer) Rules() []GroupRule {
	var rs []GroupRule
	for i, g := range o.Groups {
		rs = append(rs, GroupRule{Suffix: GroupSuffix(i), LRScale: g.LRScale, WeightDecay: g.WeightDecay, OwnDecay: g.OwnDecay,
			Beta1: g.Beta1, Beta2: g.Beta2, Momentum: g.Momentum})
	}
	return append(rs, GroupRule{LRScale: 1, WeightDecay: o.WeightDecay, Beta1: o.Beta1, Beta2: o.Beta2, Momentum: o.Momentum})
}

// Scalars returns the per-step scalars the lowered update reads at a
// constant rate lr; t counts from 1 and wd is the run-time weight decay
// (of the default group and of the groups without their own).
func (o Optimizer) Scalars(t int, lr, wd float64) map[string]float64 {
	return o.ScalarsAt(map[string]float64{}, o.Rules(), t, t, lr, nil, wd)
}

// ScalarsAt writes into s, and returns, the per-step scalars of the
// optimizer's step t and the schedule's step u (both from 1) under
// schedule sc (nil: the constant rate base), for rules (o.Rules()). It
// is the reference the clock kernel ports to C (clock.go,
// codegen/clock.go; TestClockSchedules holds the device to it): the
// session does not call it per step.
//
// The optimizer's and the schedule's steps are counted apart: a step
// skipped under loss scaling advances the schedule but not Adam's t
// (runtime/loss_scale.go), so update u of a run with skips is the
// optimizer's step t < u. Each group runs sc from its own base rate,
// base times its LRScale, as a torch.optim.lr_scheduler steps each
// param_group from its own initial_lr: for the multiplicative schedules
// (step, multistep, exponential, constant, linear, OneCycleLR) that is
// the scale times the default group's rate; for a cosine with a floor
// (CosineAnnealingLR's eta_min, WarmupCosine's Min) the floor is
// absolute and the same for every group, as eta_min is in PyTorch.
// OneCycleLR's peak is each group's own rate (PyTorch's max_lr as a list
// of the groups' rates).
func (o Optimizer) ScalarsAt(s map[string]float64, rules []GroupRule, t, u int, base float64, sc *schedule.Schedule, wd float64) map[string]float64 {
	for _, r := range rules {
		lrg := sc.Rate(base*r.LRScale, u-1)
		wdg := wd
		if r.OwnDecay {
			wdg = r.WeightDecay
		}
		s["lr"+r.Suffix] = lrg
		switch o.Kind {
		case "adam", "adamw":
			bc1 := 1 - math.Pow(r.Beta1, float64(t))
			bc2 := 1 - math.Pow(r.Beta2, float64(t))
			s["step_size"+r.Suffix] = lrg / bc1
			s["bc2_sqrt"+r.Suffix] = math.Sqrt(bc2)
			if o.Kind == "adamw" {
				s["decay"+r.Suffix] = 1 - lrg*wdg
			} else {
				s["wd"+r.Suffix] = wdg
			}
		case "sgd":
			s["wd"+r.Suffix] = wdg
			// torch initialises the momentum buffer to the first gradient.
			if t == 1 {
				s["mom"+r.Suffix], s["damp"+r.Suffix] = 0, 1
			} else {
				s["mom"+r.Suffix], s["damp"+r.Suffix] = r.Momentum, 1-o.Dampening
			}
		}
	}
	return s
}

// checkDecay is SetWeightDecay's test of a decay.
func checkDecay(wd float64) error {
	if math.IsNaN(wd) || math.IsInf(wd, 0) || wd < 0 {
		return fmt.Errorf("weight decay %v: want a finite decay ≥ 0", wd)
	}
	return nil
}

// SetWeightDecay sets the weight decay of the default parameter group and
// of every declared group without its own, from the next update on; the
// plan's value is the model's declared one. Checkpoints carry it.
func (s *Session) SetWeightDecay(wd float64) error {
	if err := s.alive("SetWeightDecay"); err != nil {
		return err
	}
	if err := checkDecay(wd); err != nil {
		return fmt.Errorf("%s: SetWeightDecay: %w", s.plan.Model, err)
	}
	s.wd = wd
	s.markClock()
	return nil
}

// WeightDecay is the run-time weight decay SetWeightDecay sets.
func (s *Session) WeightDecay() float64 { return s.wd }

// ckptGroup is a group as ngen.groups records it.
type ckptGroup struct {
	Params      []string `json:"params"`
	LRScale     float64  `json:"lr_scale"`
	WeightDecay float64  `json:"weight_decay"`
	OwnDecay    bool     `json:"own_decay"`
	Beta1       float64  `json:"beta1"`
	Beta2       float64  `json:"beta2"`
	Momentum    float64  `json:"momentum"`
}

func ckptGroups(gs []ParamGroup) []ckptGroup {
	out := []ckptGroup{}
	for _, g := range gs {
		out = append(out, ckptGroup{Params: g.Params, LRScale: g.LRScale, WeightDecay: g.WeightDecay, OwnDecay: g.OwnDecay,
			Beta1: g.Beta1, Beta2: g.Beta2, Momentum: g.Momentum})
	}
	return out
}

// GroupsJSON is the groups as a checkpoint's ngen.groups holds them, the
// format testdata/oracle/torch_optim.py builds torch.optim param_groups
// from (members by name, resolved options): cmd/train passes it to its
// PyTorch peer.
func GroupsJSON(gs []ParamGroup) string {
	b, err := json.Marshal(ckptGroups(gs))
	if err != nil {
		panic(err) // strings, bools and finite numbers
	}
	return string(b)
}

// checkGroups compares a checkpoint's ngen.groups with the model's
// groups: the optimizer state of one grouping is not the state of
// another (its moments followed other betas and rates). A file without
// optimizer state may lack it (PyTorch's weights alone).
func checkGroups(meta map[string]string, want []ParamGroup, withOpt bool) error {
	v, ok := meta["ngen.groups"]
	if !ok {
		if withOpt && len(want) > 0 {
			return fmt.Errorf("it has optimizer state but no ngen.groups, and the model's optimizer has %d parameter group(s): the state would be another grouping's", len(want))
		}
		return nil
	}
	var got []ckptGroup
	dec := json.NewDecoder(strings.NewReader(v))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&got); err != nil || dec.More() {
		return fmt.Errorf("ngen.groups %q is not a list of parameter groups", v)
	}
	mine := ckptGroups(want)
	if len(got) != len(mine) {
		return fmt.Errorf("its optimizer has %d parameter group(s), the model's %d (ngen.groups %s, the model's %s)", len(got), len(mine), v, GroupsJSON(want))
	}
	for i := range got {
		a, b := got[i], mine[i]
		if !slices.Equal(a.Params, b.Params) {
			return fmt.Errorf("parameter group %d has members %v, the model's %v", i, a.Params, b.Params)
		}
		a.Params, b.Params = nil, nil
		if !reflect.DeepEqual(a, b) {
			return fmt.Errorf("parameter group %d has options %+v, the model's %+v", i, a, b)
		}
	}
	return nil
}
