package dsl

import (
	"math"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// finite reports whether every value is a finite number: NaN and ±Inf in
// an op's argument are rejected at the op's line, not found as NaN weights
// after the first step.
func finite(vs ...float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}

// inRange reports whether v is finite in dt: 1e300 is a finite float64
// but +Inf as an f32 kernel's constant or initial weight.
func inRange(dt ir.DType, vs ...float64) bool {
	for _, v := range vs {
		if dt == ir.F32 && math.Abs(v) > math.MaxFloat32 {
			return false
		}
	}
	return finite(vs...)
}

func unary(op string, x *Tensor, attrs ir.Attrs) *Tensor {
	if zero(x) {
		return nil
	}
	pos := callerPos()
	if !finite(attrs.F) {
		x.m.fail(pos, op, "argument %g is not a finite number", attrs.F)
		return x
	}
	if !inRange(x.v.DType, attrs.F) {
		x.m.fail(pos, op, "argument %g is beyond the range of %s (it would be ±Inf)", attrs.F, x.v.DType)
		return x
	}
	return x.m.op(pos, op, attrs, x)
}

func binary(op string, x, y *Tensor) *Tensor {
	if zero(x) {
		return nil
	}
	return x.m.op(callerPos(), op, ir.Attrs{}, x, y)
}

// ReLU is max(x, 0).
func ReLU(x *Tensor) *Tensor { return unary("relu", x, ir.Attrs{}) }

// Sigmoid is 1/(1+e^-x).
func Sigmoid(x *Tensor) *Tensor { return unary("sigmoid", x, ir.Attrs{}) }

// Tanh is tanh(x).
func Tanh(x *Tensor) *Tensor { return unary("tanh", x, ir.Attrs{}) }

// GELU is PyTorch's default (erf) GELU.
func GELU(x *Tensor) *Tensor { return unary("gelu", x, ir.Attrs{}) }

// Exp is e^x.
func Exp(x *Tensor) *Tensor { return unary("exp", x, ir.Attrs{}) }

// Log is the natural logarithm.
func Log(x *Tensor) *Tensor { return unary("log", x, ir.Attrs{}) }

// Sqrt is the square root.
func Sqrt(x *Tensor) *Tensor { return unary("sqrt", x, ir.Attrs{}) }

// Square is x².
func Square(x *Tensor) *Tensor { return unary("square", x, ir.Attrs{}) }

// Abs is |x|.
func Abs(x *Tensor) *Tensor { return unary("abs", x, ir.Attrs{}) }

// Neg is -x.
func Neg(x *Tensor) *Tensor { return unary("neg", x, ir.Attrs{}) }

// Scale is x·f.
func Scale(x *Tensor, f float64) *Tensor { return unary("scale", x, ir.Attrs{F: f}) }

// AddScalar is x+f.
func AddScalar(x *Tensor, f float64) *Tensor { return unary("addc", x, ir.Attrs{F: f}) }

// Pow is x^f.
func Pow(x *Tensor, f float64) *Tensor { return unary("powc", x, ir.Attrs{F: f}) }

// Add is x+y with broadcasting.
func Add(x, y *Tensor) *Tensor { return binary("add", x, y) }

// Sub is x-y with broadcasting.
func Sub(x, y *Tensor) *Tensor { return binary("sub", x, y) }

// Mul is x·y with broadcasting.
func Mul(x, y *Tensor) *Tensor { return binary("mul", x, y) }

// Div is x/y with broadcasting.
func Div(x, y *Tensor) *Tensor { return binary("div", x, y) }

// MatMul is torch.matmul for operands of rank ≥ 2.
func MatMul(a, b *Tensor) *Tensor { return MatMulT(a, b, false, false) }

// MatMulT is MatMul with the last two dims of a and/or b transposed.
func MatMulT(a, b *Tensor, transA, transB bool) *Tensor {
	if zero(a) {
		return nil
	}
	return a.m.op(callerPos(), "matmul", ir.Attrs{TransA: transA, TransB: transB}, a, b)
}

func reduce(op string, x *Tensor, keepDim bool, axes []int) *Tensor {
	if zero(x) {
		return nil
	}
	return x.m.op(callerPos(), op, ir.Attrs{Axes: axes, KeepDim: keepDim}, x)
}

// Sum adds over axes (all when none are given).
func Sum(x *Tensor, keepDim bool, axes ...int) *Tensor { return reduce("sum", x, keepDim, axes) }

// Mean averages over axes (all when none are given).
func Mean(x *Tensor, keepDim bool, axes ...int) *Tensor { return reduce("mean", x, keepDim, axes) }

// Max is torch.amax over axes (all when none are given).
func Max(x *Tensor, keepDim bool, axes ...int) *Tensor { return reduce("max", x, keepDim, axes) }

// Reshape views x with new dims (ints or dsl.Batch).
func Reshape(x *Tensor, shape ...any) *Tensor {
	if zero(x) {
		return nil
	}
	pos := callerPos()
	return x.m.op(pos, "reshape", ir.Attrs{Shape: dims(x.m, pos, "reshape", shape)}, x)
}

// Dropout zeroes elements with probability p in training mode and scales
// the rest by 1/(1-p), as torch.nn.Dropout.
func Dropout(x *Tensor, p float64) *Tensor {
	if zero(x) {
		return nil
	}
	pos := callerPos()
	if !(p >= 0 && p < 1) { // NaN too
		x.m.fail(pos, "dropout", "p must be in [0, 1), got %g", p)
		return x
	}
	if p == 0 {
		return x
	}
	x.m.stream++
	return x.m.op(pos, "dropout", ir.Attrs{F: p, I: x.m.stream}, x)
}

// CrossEntropy is F.cross_entropy(logits, labels) with mean reduction;
// logits [..., C], labels [...] i32.
func CrossEntropy(logits, labels *Tensor) *Tensor {
	if zero(logits) {
		return nil
	}
	return logits.m.op(callerPos(), "cross_entropy", ir.Attrs{}, logits, labels)
}

// CrossEntropyOptions are F.cross_entropy's options. The zero value is
// F.cross_entropy's defaults, except that no label is ignored unless
// Ignore is set.
type CrossEntropyOptions struct {
	// LabelSmoothing is label_smoothing, in [0, 1]: the target is
	// (1-ε)·onehot + ε/C.
	LabelSmoothing float64
	// Ignore turns IgnoreIndex on (ignore_index=IgnoreIndex); without it
	// every label is a target, so the zero value ignores nothing, and an
	// IgnoreIndex set without Ignore is an error rather than a no-op.
	Ignore bool
	// IgnoreIndex is ignore_index: a target equal to it adds nothing to
	// the loss (neither its negative log-likelihood nor its smoothing
	// term) and gets a zero gradient, and the mean divides by the number
	// of the other targets, as PyTorch does. The kernels count them on
	// the device, in the loss and the gradient alike.
	//
	// It must lie outside [0, C), C the number of classes: labels are
	// i32, so a negative index such as PyTorch's default -100 marks a
	// target without taking a class from the model, while an index
	// inside the range would silently keep the model from ever learning
	// that class (map such targets, a padding token say, to -100 in the
	// data instead). An index inside the range, or one an i32 cannot
	// hold, is an error at this call's line.
	//
	// A batch whose every target is ignored has loss 0 and zero
	// gradients (PyTorch's loss is 0/0, NaN, and its gradients zero):
	// the step is taken, so it changes no parameter under plain SGD,
	// while momentum, Adam's moments and weight decay act as for any
	// zero gradient. A NaN loss would have the step refused as a
	// non-finite one (docs/ARCHITECTURE.md, "Transactional step").
	IgnoreIndex int
}

// CrossEntropyWith is CrossEntropy with options, F.cross_entropy(logits,
// labels, label_smoothing=..., ignore_index=...), fused with its gradient
// as CrossEntropy is.
func CrossEntropyWith(logits, labels *Tensor, o CrossEntropyOptions) *Tensor {
	if zero(logits) {
		return nil
	}
	pos := callerPos()
	attrs := ir.Attrs{F: o.LabelSmoothing}
	switch {
	case o.Ignore:
		attrs.Ints = []int{o.IgnoreIndex}
	case o.IgnoreIndex != 0:
		logits.m.fail(pos, "cross_entropy", "IgnoreIndex %d without Ignore: set Ignore: true to ignore it", o.IgnoreIndex)
		return logits
	}
	return logits.m.op(pos, "cross_entropy", attrs, logits, labels)
}
