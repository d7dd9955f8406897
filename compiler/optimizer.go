package compiler

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// lowerOptimizer appends the optimizer update as ordinary elementwise ops
// over the flat parameter vector. The parameters, their gradients and each
// piece of optimizer state are laid out back to back, so one elementwise
// kernel updates every parameter (the multi-tensor update). Per-step
// scalars (learning rate, bias corrections) are kernel arguments that the
// runtime computes with PyTorch's formulas (runtime.Optimizer.Scalars).
func lowerOptimizer(p *Program) error {
	f := p.Step
	o := p.Model.Optimizer
	params := f.Params()
	if len(params) == 0 {
		return fmt.Errorf("model %s (%s): nothing to train: no parameters", p.Model.Name, p.Model.Pos)
	}
	dt := params[0].DType
	var grads []*ir.Value
	for _, prm := range params {
		if prm.DType != dt {
			return fmt.Errorf("param %q (%s): all parameters must share one dtype, got %s and %s", prm.Name, prm.Pos, dt, prm.DType)
		}
		grads = append(grads, f.Grads[prm.Name])
	}
	mark := len(f.Values)
	b := &ops.Builder{F: f, Pos: p.Model.Pos}
	P := b.Op("flat", ir.Attrs{}, params...)
	G := b.Op("flat", ir.Attrs{}, grads...)
	if o.ClipValue > 0 {
		// clip_grad_value_ before the step: fused into the update kernel,
		// after accumulation and the all-reduce (the update phase).
		G = b.Op("clampc", ir.Attrs{F: o.ClipValue}, G)
	}
	if o.ClipNorm > 0 {
		// clip_grad_norm_: the coefficient comes from the builtin
		// GradNormKernel the memory plan puts first in the update phase
		// (compiler/guard.go); the scale is fused into the update kernel.
		G = b.Op("clip_norm_scale", ir.Attrs{}, G)
	}
	n := P.Shape
	// The optimizer's state names are reserved: a user State of the same
	// name would share its buffer (the memory plan keys state by name).
	for _, v := range f.Values {
		if (v.Role == ir.State || v.Role == ir.Param) && reservedState(o.Kind, v.Name) {
			return fmt.Errorf("%s %q (%s): the name is reserved for the %s optimizer's state; choose another", v.Op, v.Name, v.Pos, o.Kind)
		}
	}
	state := func(name string) *ir.Value {
		v := f.NewValue("state", dt, n.Clone(), b.Pos)
		v.Role, v.Name = ir.State, name
		return v
	}
	scalar := func(name string) *ir.Value {
		v := f.NewValue("scalar", dt, ir.Shape{}, b.Pos)
		v.Role, v.Name = ir.Scalar, name
		return v
	}
	mul := func(x, y *ir.Value) *ir.Value { return b.Binary("mul", x, y) }
	add := func(x, y *ir.Value) *ir.Value { return b.Binary("add", x, y) }
	switch o.Kind {
	case "adam", "adamw":
		g := G
		if o.Kind == "adam" && o.WeightDecay != 0 {
			g = add(g, b.Scale(P, o.WeightDecay))
		}
		m, v := state(o.Kind+".exp_avg"), state(o.Kind+".exp_avg_sq")
		m2 := add(b.Scale(m, o.Beta1), b.Scale(g, 1-o.Beta1))
		v2 := add(b.Scale(v, o.Beta2), b.Scale(mul(g, g), 1-o.Beta2))
		denom := b.Op("addc", ir.Attrs{F: o.Eps}, b.Binary("div", b.Unary("sqrt", v2), scalar("bc2_sqrt")))
		p0 := P
		if o.Kind == "adamw" {
			p0 = mul(P, scalar("decay"))
		}
		p2 := b.Binary("sub", p0, mul(scalar("step_size"), b.Binary("div", m2, denom)))
		f.Updates = append(f.Updates, ir.Update{State: m, New: m2}, ir.Update{State: v, New: v2}, ir.Update{State: P, New: p2})
	case "sgd":
		d := G
		if o.WeightDecay != 0 {
			d = add(d, b.Scale(P, o.WeightDecay))
		}
		if o.Momentum != 0 {
			buf := state("sgd.momentum_buffer")
			buf2 := add(mul(scalar("mom"), buf), mul(scalar("damp"), d))
			f.Updates = append(f.Updates, ir.Update{State: buf, New: buf2})
			if o.Nesterov {
				d = add(d, b.Scale(buf2, o.Momentum))
			} else {
				d = buf2
			}
		}
		p2 := b.Binary("sub", P, mul(scalar("lr"), d))
		f.Updates = append(f.Updates, ir.Update{State: P, New: p2})
	default:
		return fmt.Errorf("model %s (%s): unknown optimizer %q", p.Model.Name, p.Model.Pos, o.Kind)
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

// reservedState reports whether name is one the optimizer kind gives its
// own state (kind.exp_avg, sgd.momentum_buffer, ...).
func reservedState(kind, name string) bool {
	return strings.HasPrefix(name, kind+".")
}
