package compiler

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// autodiff appends the backward graph to the step function: a reverse walk
// over the values in topological order that applies each op's gradient rule
// from the op table and sums the contributions of multiple uses. Every
// parameter gets a gradient of its own storage (a zero fill when the loss
// does not depend on it; such a parameter is recorded in Func.Unreached,
// and the optimizer does not update it).
func autodiff(p *Program) error {
	f := p.Step
	loss := f.Outputs["loss"]
	forward := append([]*ir.Value(nil), f.Values...)
	b := &ops.Builder{F: f, Pos: loss.Pos}
	grads := map[*ir.Value]*ir.Value{}
	grads[loss] = lossSeed(p, b, loss)
	mark := len(f.Values) - 1
	for i := len(forward) - 1; i >= 0; i-- {
		v := forward[i]
		g := grads[v]
		if g == nil {
			continue
		}
		d := ops.Lookup(v.Op)
		if d.Kind == ops.Source || isConst(v) {
			continue // leaves: a constant's gradient goes nowhere
		}
		if d.Grad == nil {
			return fmt.Errorf("%s (%s): op has no gradient rule", v.Op, v.Pos)
		}
		b.Pos = v.Pos
		gs := d.Grad(b, v, g)
		if b.Err != nil {
			return fmt.Errorf("gradient of %w", b.Err)
		}
		for k, a := range v.Args {
			if k >= len(gs) || gs[k] == nil || !a.DType.IsFloat() {
				continue
			}
			if prev := grads[a]; prev != nil {
				grads[a] = b.Binary("add", prev, gs[k])
			} else {
				grads[a] = gs[k]
			}
		}
	}
	for _, prm := range f.Params() {
		g := grads[prm]
		b.Pos = prm.Pos
		if g == nil {
			g = b.Op("fill", ir.Attrs{F: 0, Shape: prm.Shape.Clone(), Str: prm.DType.String()})
			if f.Unreached == nil {
				f.Unreached = map[string]bool{}
			}
			f.Unreached[prm.Name] = true
		}
		// A gradient must be a kernel's own result so that memory planning
		// can place it in the gradient region: copy views, sources,
		// constants and values shared with another parameter.
		if needsCopy(g, f.Grads) {
			g = b.Unary("copy", g)
		}
		f.Grads[prm.Name] = g
	}
	if b.Err != nil {
		return b.Err
	}
	if ps := f.Params(); len(ps) > 0 && len(f.Unreached) == len(ps) {
		// PyTorch's backward refuses this too ("element 0 of tensors does
		// not require grad").
		return fmt.Errorf("loss (%s): the loss depends on no parameter, so there is nothing to train", loss.Pos)
	}
	for _, v := range f.Values[mark+1:] {
		v.Phase = "bwd"
	}
	f.Renumber()
	return nil
}

// lossSeed is the loss's gradient: 1, or under dynamic loss scaling
// (ir.Precision.Scaler) the run-time scalar loss_scale, which is what
// GradScaler's scaler.scale(loss).backward() seeds (the gradient of
// loss·scale with respect to loss), so every gradient is the scaled one
// and the update unscales (lowerGroup's inv_scale).
func lossSeed(p *Program, b *ops.Builder, loss *ir.Value) *ir.Value {
	if pr := p.Model.Precision; pr == nil || pr.Scaler == nil {
		return b.Op("fill", ir.Attrs{F: 1, Shape: ir.Shape{}, Str: loss.DType.String()})
	}
	v := p.Step.NewValue("scalar", loss.DType, ir.Shape{}, loss.Pos)
	v.Role, v.Name = ir.Scalar, runtime.LossScaleScalar
	// A kernel's own result: gradient rules that read their seed at an
	// index (cross-entropy's) need it in memory, not as an argument.
	return b.Unary("copy", v)
}

func needsCopy(g *ir.Value, taken map[string]*ir.Value) bool {
	b := base(g)
	d := ops.Lookup(b.Op)
	if d.Kind == ops.Source || d.Kind == ops.View || isConst(b) {
		return true
	}
	for _, t := range taken {
		if base(t) == b {
			return true
		}
	}
	return false
}

func isConst(v *ir.Value) bool { return v.Op == "fill" }

// base follows views to the value that owns the storage.
func base(v *ir.Value) *ir.Value {
	for v.Op == "reshape" {
		v = v.Args[0]
	}
	return v
}
