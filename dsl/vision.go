package dsl

import (
	"math"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// Conv configures Conv2d; zero fields take PyTorch's defaults (stride 1,
// padding 0, dilation 1, groups 1, with bias).
type Conv struct {
	Stride, Padding, Dilation, Groups int
	NoBias                            bool
}

// Pool configures MaxPool2d and AvgPool2d; zero fields take PyTorch's
// defaults (stride = kernel, padding 0, dilation 1).
type Pool struct {
	Stride, Padding, Dilation int
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// Conv2d is torch.nn.Conv2d(C, out, kernel) on an N×C×H×W input: weight
// [out, C/groups, kernel, kernel] and bias [out], both initialised
// U(-1/√fan_in, 1/√fan_in) as PyTorch does. It lowers to im2col, a batched
// GEMM with the weight, and the bias add, which fuses with a following
// activation into the GEMM's epilogue kernel.
func (m *Model) Conv2d(name string, x *Tensor, out, kernel int, opt ...Conv) *Tensor {
	pos := callerPos()
	if m.err != nil || m.isNil(pos, "conv2d", name, "the input", x) {
		return m.errTensor(x)
	}
	o, ok := single(m, pos, "conv2d", opt)
	if !ok {
		return x
	}
	w := ops.Window{KH: kernel, KW: kernel, SH: orDefault(o.Stride, 1), SW: orDefault(o.Stride, 1),
		PH: o.Padding, PW: o.Padding, DH: orDefault(o.Dilation, 1), DW: orDefault(o.Dilation, 1), G: orDefault(o.Groups, 1)}
	s := x.v.Shape
	if len(s) != 4 || s[1].Sym != "" {
		m.fail(pos, "conv2d", "%s: input %s must be N×C×H×W with a static C", name, s)
		return x
	}
	c := s[1].N
	if w.G < 1 {
		// Checked before the weight [out, C/groups, k, k] is declared,
		// whose negative dimension would otherwise be the message.
		m.fail(pos, "conv2d", "%s: groups %d must be positive", name, o.Groups)
		return x
	}
	if kernel < 1 || out < 1 || c%w.G != 0 || out%w.G != 0 {
		m.fail(pos, "conv2d", "%s: %d input and %d output channels, kernel %d: channels must be positive and divisible by groups %d", name, c, out, kernel, w.G)
		return x
	}
	if x.v.DType != F32 && x.v.DType != F64 {
		m.fail(pos, "conv2d", "%s: input must be float, got %s", name, x.v.Type())
		return x
	}
	k := c / w.G * kernel * kernel
	bound := 1 / math.Sqrt(float64(k))
	wt := m.declare(ir.Param, "conv2d.weight", name+".weight", x.v.DType, Uniform(-bound, bound), ir.Static(out, c/w.G, kernel, kernel), pos)
	var bias *ir.Value
	if !o.NoBias {
		bias = m.declare(ir.Param, "conv2d.bias", name+".bias", x.v.DType, Uniform(-bound, bound), ir.Static(out), pos).v
	}
	m.b.Pos = pos
	y := ops.Conv2d(m.b, x.v, wt.v, bias, w)
	if m.b.Err != nil && m.err == nil {
		m.err = m.b.Err
	}
	return &Tensor{m, y}
}

func poolWindow(kernel int, o Pool, dilation bool) ops.Window {
	st := orDefault(o.Stride, kernel)
	d := 1
	if dilation {
		d = orDefault(o.Dilation, 1)
	}
	return ops.Window{KH: kernel, KW: kernel, SH: st, SW: st, PH: o.Padding, PW: o.Padding, DH: d, DW: d, G: 1}
}

// MaxPool2d is torch.nn.MaxPool2d(kernel) on N×C×H×W. It stores, per
// output, the offset of the maximum in its window (i32), which the
// backward pass routes the gradient through.
func MaxPool2d(x *Tensor, kernel int, opt ...Pool) *Tensor {
	if zero(x) {
		return nil
	}
	m, pos := x.m, callerPos()
	o, ok := single(m, pos, "maxpool2d", opt)
	if m.err != nil || !ok {
		return x
	}
	m.b.Pos = pos
	y := ops.MaxPool2d(m.b, x.v, poolWindow(kernel, o, true))
	if m.b.Err != nil && m.err == nil {
		m.err = m.b.Err
	}
	return &Tensor{m, y}
}

// AvgPool2d is torch.nn.AvgPool2d(kernel) on N×C×H×W, counting padding
// as zeros (count_include_pad, PyTorch's default).
func AvgPool2d(x *Tensor, kernel int, opt ...Pool) *Tensor {
	if zero(x) {
		return nil
	}
	pos := callerPos()
	o, ok := single(x.m, pos, "avgpool", opt)
	if !ok {
		return x
	}
	if o.Dilation != 0 && o.Dilation != 1 {
		x.m.fail(pos, "avgpool", "AvgPool2d has no dilation")
		return x
	}
	return x.m.op(pos, "avgpool", ir.Attrs{Ints: poolWindow(kernel, o, false).Ints()}, x)
}

// Flatten is torch.nn.Flatten(): every dimension after the first becomes
// one.
func Flatten(x *Tensor) *Tensor {
	if zero(x) {
		return nil
	}
	pos := callerPos()
	s := x.v.Shape
	if len(s) < 2 {
		x.m.fail(pos, "flatten", "needs rank ≥ 2, got %s", s)
		return x
	}
	rest := ir.Shape(s[1:]).Size()
	if len(rest.Syms) > 0 {
		x.m.fail(pos, "flatten", "needs static dimensions after the first, got %s", s)
		return x
	}
	return x.m.op(pos, "reshape", ir.Attrs{Shape: ir.Shape{s[0], ir.D(int(rest.N))}}, x)
}
