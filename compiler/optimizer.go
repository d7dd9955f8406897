package compiler

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// lowerOptimizer appends the optimizer update as ordinary elementwise ops
// over the flat parameter vector. The parameters, their gradients and each
// piece of optimizer state are laid out back to back, so one elementwise
// kernel updates every parameter (the multi-tensor update); with parameter
// groups (optimizer_groups.go) each group's parameters are contiguous and
// one update per group runs over its slice, with its own options. Per-step
// scalars (learning rate, bias corrections, weight decay) are kernel
// arguments that the runtime computes with PyTorch's formulas
// (runtime.Optimizer.Scalars).
func lowerOptimizer(p *Program) error {
	f := p.Step
	o := p.Model.Optimizer
	params := f.Params()
	if len(params) == 0 {
		return fmt.Errorf("model %s (%s): nothing to train: no parameters", p.Model.Name, p.Model.Pos)
	}
	switch o.Kind {
	case "sgd", "adam", "adamw":
	default:
		return fmt.Errorf("model %s (%s): unknown optimizer %q", p.Model.Name, p.Model.Pos, o.Kind)
	}
	dt := params[0].DType
	for _, prm := range params {
		if prm.DType != dt {
			return fmt.Errorf("param %q (%s): all parameters must share one dtype, got %s and %s", prm.Name, prm.Pos, dt, prm.DType)
		}
	}
	groups, err := paramGroups(p.Model, params, f.Unreached)
	if err != nil {
		return err
	}
	mark := len(f.Values)
	b := &ops.Builder{F: f, Pos: p.Model.Pos}
	// The optimizer's state names are reserved: a user State of the same
	// name would share its buffer (the memory plan keys state by name).
	for _, v := range f.Values {
		if (v.Role == ir.State || v.Role == ir.Param) && reservedState(o.Kind, v.Name) {
			return fmt.Errorf("%s %q (%s): the name is reserved for the %s optimizer's state; choose another", v.Op, v.Name, v.Pos, o.Kind)
		}
	}
	var total int64
	for _, prm := range params {
		total += prm.Shape.Size().N
	}
	// Each state vector spans every parameter, in the layout of the
	// parameters (groups back to back, memplan.go), so checkpoints slice
	// it per parameter whatever the groups; a group's update reads and
	// writes its segment.
	states := map[string]*ir.Value{}
	state := func(name string, off, n int64) *ir.Value {
		v, ok := states[name]
		if !ok {
			v = f.NewValue("state", dt, ir.Static(int(total)), b.Pos)
			v.Role, v.Name = ir.State, name
			states[name] = v
		}
		if off == 0 && n == total {
			return v
		}
		return b.Op("segment", ir.Attrs{Ints: []int{int(off)}, Shape: ir.Static(int(n))}, v)
	}
	var off int64
	for i, rule := range planOptimizer(o, groups).Rules() {
		members := groups[i]
		if len(members) == 0 {
			continue // the default group, when the declared ones took every parameter
		}
		// The update covers the group's reached parameters, which
		// paramGroups put first; the rest keep their values and state,
		// as PyTorch's step skips a parameter whose .grad is None.
		var n, all int64
		var reached, gs []*ir.Value
		for _, prm := range members {
			all += prm.Shape.Size().N
			if f.Unreached[prm.Name] {
				continue
			}
			n += prm.Shape.Size().N
			reached = append(reached, prm)
			gs = append(gs, f.Grads[prm.Name])
		}
		if len(reached) > 0 {
			at := off
			if err := lowerGroup(b, f, o, p.Model.Precision, rule, b.Op("flat", ir.Attrs{}, reached...), b.Op("flat", ir.Attrs{}, gs...), func(name string) *ir.Value { return state(name, at, n) }); err != nil {
				return err
			}
		}
		off += all
	}
	if b.Err != nil {
		return b.Err
	}
	for _, v := range f.Values[mark:] {
		v.Phase = "opt"
	}
	f.Renumber()
	return nil
}

// lowerGroup appends the update of one parameter group: P and G are its
// parameters and gradients as flat vectors, state its slice of an
// optimizer state vector. Per-step scalars carry the group's suffix
// (runtime.Optimizer.Scalars); betas and Nesterov's momentum are the
// group's constants.
func lowerGroup(b *ops.Builder, f *ir.Func, o *ir.Optimizer, pr *ir.Precision, rule runtime.GroupRule, P, G *ir.Value, state func(string) *ir.Value) error {
	dt := P.DType
	if pr != nil && pr.Scaler != nil {
		// GradScaler's unscale_, fused into the update kernel: the
		// gradients are the scaled loss's (autodiff's lossSeed), and
		// clipping by value or norm sees them unscaled, as
		// scaler.unscale_(opt) before clip_grad_*_ does. The grad-norm
		// kernel multiplies by the same scalar (codegen/guard.go).
		inv := f.NewValue("scalar", dt, ir.Shape{}, b.Pos)
		inv.Role, inv.Name = ir.Scalar, runtime.InvScaleScalar
		G = b.Binary("mul", G, inv)
	}
	if o.ClipValue > 0 {
		// clip_grad_value_ before the step: fused into the update kernel,
		// after accumulation and the all-reduce (the update phase).
		G = b.Op("clampc", ir.Attrs{F: o.ClipValue}, G)
	}
	if o.GradNorm() {
		// clip_grad_norm_: the coefficient comes from the builtin
		// GradNormKernel the memory plan puts first in the update phase
		// (compiler/guard.go); the scale is fused into the update kernel.
		G = b.Op("clip_norm_scale", ir.Attrs{}, G)
	}
	scalar := func(name string) *ir.Value {
		v := f.NewValue("scalar", dt, ir.Shape{}, b.Pos)
		v.Role, v.Name = ir.Scalar, name+rule.Suffix
		return v
	}
	mul := func(x, y *ir.Value) *ir.Value { return b.Binary("mul", x, y) }
	add := func(x, y *ir.Value) *ir.Value { return b.Binary("add", x, y) }
	// Weight decay is the run-time scalar wd (decay = 1 - lr·wd for
	// AdamW), so that Session.SetWeightDecay reaches every model.
	switch o.Kind {
	case "adam", "adamw":
		g := G
		if o.Kind == "adam" {
			g = add(g, mul(P, scalar("wd")))
		}
		m, v := state(o.Kind+".exp_avg"), state(o.Kind+".exp_avg_sq")
		m2 := add(b.Scale(m, rule.Beta1), b.Scale(g, 1-rule.Beta1))
		v2 := add(b.Scale(v, rule.Beta2), b.Scale(mul(g, g), 1-rule.Beta2))
		denom := b.Op("addc", ir.Attrs{F: o.Eps}, b.Binary("div", b.Unary("sqrt", v2), scalar("bc2_sqrt")))
		p0 := P
		if o.Kind == "adamw" {
			p0 = mul(P, scalar("decay"))
		}
		p2 := b.Binary("sub", p0, mul(scalar("step_size"), b.Binary("div", m2, denom)))
		f.Updates = append(f.Updates, ir.Update{State: m, New: m2}, ir.Update{State: v, New: v2}, ir.Update{State: P, New: p2})
	case "sgd":
		d := add(G, mul(P, scalar("wd")))
		if rule.Momentum != 0 {
			buf := state("sgd.momentum_buffer")
			buf2 := add(mul(scalar("mom"), buf), mul(scalar("damp"), d))
			f.Updates = append(f.Updates, ir.Update{State: buf, New: buf2})
			if o.Nesterov {
				d = add(d, b.Scale(buf2, rule.Momentum))
			} else {
				d = buf2
			}
		}
		p2 := b.Binary("sub", P, mul(scalar("lr"), d))
		f.Updates = append(f.Updates, ir.Update{State: P, New: p2})
	default:
		return fmt.Errorf("unknown optimizer %q", o.Kind)
	}
	return nil
}

// reservedState reports whether name is one the optimizer kind gives its
// own state (kind.exp_avg, sgd.momentum_buffer, ...).
func reservedState(kind, name string) bool {
	return strings.HasPrefix(name, kind+".")
}
