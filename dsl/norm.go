package dsl

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// State declares persistent, non-trainable storage (running statistics):
// saved in checkpoints, initialised by init, changed only by Update.
func (m *Model) State(name string, dt DType, init Init, shape ...int) *Tensor {
	return m.declare(ir.State, "", name, dt, init, ir.Static(shape...), callerPos())
}

// Update writes value into state after every forward pass that computes
// it (the training step, and Predict), like an in-place update of a
// buffer in a torch module's forward.
func (m *Model) Update(state, value *Tensor) {
	pos := callerPos()
	if m.err != nil || m.isNil(pos, "update", "Update", "the state", state) || m.isNil(pos, "update", "Update", "the value", value) {
		return
	}
	m.update(pos, state, value)
}

// update checks and records one state update.
func (m *Model) update(pos ir.Pos, state, value *Tensor) {
	if state.v.Role != ir.State {
		m.fail(pos, "update", "the first argument must be a tensor declared with m.State, got %s", describe(state.v))
		return
	}
	if !state.v.Shape.Eq(value.v.Shape) || state.v.DType != value.v.DType {
		m.fail(pos, "update", "state %q is %s but the value is %s", state.v.Name, state.v.Type(), value.v.Type())
		return
	}
	for _, u := range m.m.Forward.Updates {
		if u.State == state.v {
			m.fail(pos, "update", "state %q updated twice", state.v.Name)
			return
		}
	}
	m.m.Forward.Updates = append(m.m.Forward.Updates, ir.Update{State: state.v, New: value.v})
}

// BatchNorm configures BatchNorm2d; zero fields take PyTorch's defaults
// (momentum 0.1, eps 1e-5).
type BatchNorm struct {
	Momentum, Eps float64
}

// BatchNorm2d is torch.nn.BatchNorm2d(C) on N×C×H×W: in training mode it
// normalises with the batch's mean and (biased) variance over N, H and W
// and moves running_mean and running_var (unbiased) by momentum; in eval
// mode (Model.Eval in the generated package) it normalises with the
// running statistics. weight starts at 1 and bias at 0.
func (m *Model) BatchNorm2d(name string, x *Tensor, opt ...BatchNorm) *Tensor {
	pos := callerPos()
	if m.err != nil || m.isNil(pos, "batchnorm2d", name, "the input", x) {
		return m.errTensor(x)
	}
	given, ok := single(m, pos, "batchnorm2d", opt)
	if !ok {
		return x
	}
	o := BatchNorm{Momentum: 0.1, Eps: 1e-5}
	if given.Momentum != 0 {
		o.Momentum = given.Momentum
	}
	if given.Eps != 0 {
		o.Eps = given.Eps
	}
	s := x.v.Shape
	if len(s) != 4 || s[1].Sym != "" {
		m.fail(pos, "batchnorm2d", "%s: input %s must be N×C×H×W with a static C", name, s)
		return x
	}
	if !(o.Momentum >= 0 && o.Momentum <= 1 && o.Eps > 0 && finite(o.Eps)) {
		m.fail(pos, "batchnorm2d", "%s: momentum %g must be in [0, 1] and eps %g positive", name, o.Momentum, o.Eps)
		return x
	}
	c := s[1].N
	dt := x.v.DType
	gamma := m.declare(ir.Param, "batchnorm.weight", name+".weight", dt, Const(1), ir.Static(c), pos)
	beta := m.declare(ir.Param, "batchnorm.bias", name+".bias", dt, Const(0), ir.Static(c), pos)
	rm := m.declare(ir.State, "", name+".running_mean", dt, Const(0), ir.Static(c), pos)
	rv := m.declare(ir.State, "", name+".running_var", dt, Const(1), ir.Static(c), pos)

	m.b.Pos = pos
	y, newMean, newVar := ops.BatchNorm2d(m.b, x.v, gamma.v, beta.v, rm.v, rv.v, o.Momentum, o.Eps)
	if m.b.Err != nil {
		if m.err == nil {
			m.err = m.b.Err
		}
		return x
	}
	m.update(pos, rm, &Tensor{m, newMean})
	m.update(pos, rv, &Tensor{m, newVar})
	return &Tensor{m, y}
}

// describe names a tensor as the user wrote it, not by its IR number.
func describe(v *ir.Value) string {
	switch {
	case v.Name != "":
		return fmt.Sprintf("%s %q", v.Role, v.Name)
	case v.Pos.File != "":
		return fmt.Sprintf("the result of %s at %s", v.Op, v.Pos)
	}
	return "the result of " + v.Op
}
