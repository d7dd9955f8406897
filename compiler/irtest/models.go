// Package irtest declares small models directly in IR for tests of the
// compiler, codegen and runtime, so those tests do not depend on the DSL.
package irtest

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// Builder declares a forward function.
type Builder struct {
	*ops.Builder
	F *ir.Func
}

// New starts a model body.
func New() *Builder {
	f := ir.NewFunc("forward")
	return &Builder{Builder: &ops.Builder{F: f, Pos: ir.Pos{File: "irtest.go", Line: 1}}, F: f}
}

// Source declares an input, param or state.
func (b *Builder) Source(op string, role ir.Role, name string, dt ir.DType, shape ir.Shape, init string) *ir.Value {
	v := b.F.NewValue(op, dt, shape, b.Pos)
	v.Role, v.Name, v.Attrs.Init = role, name, init
	return v
}

// Input declares a batch input.
func (b *Builder) Input(name string, dt ir.DType, shape ...ir.Dim) *ir.Value {
	return b.Source("input", ir.Input, name, dt, shape, "")
}

// Param declares a parameter initialised uniformly in ±bound.
func (b *Builder) Param(name string, dt ir.DType, bound float64, shape ...int) *ir.Value {
	return b.Source("param", ir.Param, name, dt, ir.Static(shape...), fmt.Sprintf("uniform:%g:%g", -bound, bound))
}

// Linear is torch.nn.Linear.
func (b *Builder) Linear(name string, h *ir.Value, n int) *ir.Value {
	k := h.Shape[len(h.Shape)-1].N
	bound := 1 / math.Sqrt(float64(k))
	w := b.Param(name+".weight", h.DType, bound, n, k)
	bias := b.Param(name+".bias", h.DType, bound, n)
	return b.Binary("add", b.Op("matmul", ir.Attrs{TransB: true}, h, w), bias)
}

// Model finishes a model.
func (b *Builder) Model(name string, loss, out *ir.Value, opt ir.Optimizer) *ir.Model {
	if b.Err != nil {
		panic(b.Err)
	}
	return &ir.Model{Name: name, Source: "irtest.go", Forward: b.F, Loss: loss, Output: out, Optimizer: &opt, Pos: b.Pos}
}

// Adam is torch.optim.Adam's defaults at lr 1e-3.
var Adam = ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}

// MLP is in → hidden ReLU (Dropout) → classes with cross-entropy.
func MLP(dt ir.DType, in, hidden, classes int, dropout float64, opt ir.Optimizer) *ir.Model {
	b := New()
	x := b.Input("x", dt, ir.S("B"), ir.D(in))
	y := b.Input("y", ir.I32, ir.S("B"))
	h := b.Unary("relu", b.Linear("fc1", x, hidden))
	if dropout > 0 {
		h = b.Op("dropout", ir.Attrs{F: dropout, I: 1}, h)
	}
	logits := b.Linear("fc2", h, classes)
	return b.Model("mlp", b.Binary("cross_entropy", logits, y), logits, opt)
}
