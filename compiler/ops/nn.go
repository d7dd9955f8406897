package ops

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// cross_entropy(logits [..., C], labels [...] i32) is the mean over label
// elements of logsumexp(logits) - logits[label], as torch's
// F.cross_entropy. Its gradient op ce_grad(logits, labels, g) is
// (softmax(logits) - onehot(label)) * g / N. Codegen's crossentropy.go
// fuses both into one row kernel that never stores the probabilities.
// Attrs.F is PyTorch's label_smoothing ε: the target is (1-ε)·onehot +
// ε/C, so a row's loss is lse - (1-ε)·x[label] - ε/C·Σx and its gradient
// (softmax - (1-ε)·onehot - ε/C) * g / N.
//
// Attrs.Ints, when it holds one value, is PyTorch's ignore_index
// (CEIgnore): a row whose label equals it adds nothing to the loss (its
// smoothing term neither) and gets a zero gradient, and N is the number
// of the other rows, which the kernels count on the device. With no row
// left N is taken as 1: the loss is 0 (PyTorch's is 0/0, NaN) and every
// gradient 0 (as PyTorch's). The index must lie outside [0, C): labels
// are i32, so a negative index (PyTorch's default -100) marks a target
// without taking a class from the model, and an index inside the range
// would silently stop the model from learning that class.

func ceInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	x, y := v.Args[0], v.Args[1]
	if !x.DType.IsFloat() {
		return nil, 0, fmt.Errorf("logits must be float, got %s", x.Type())
	}
	if y.DType != ir.I32 {
		return nil, 0, fmt.Errorf("labels must be i32, got %s", y.Type())
	}
	if len(x.Shape) < 1 || !x.Shape[:len(x.Shape)-1].Eq(y.Shape) {
		return nil, 0, fmt.Errorf("logits %s and labels %s disagree: labels must be logits without the class dim", x.Shape, y.Shape)
	}
	if e := v.Attrs.F; !(e >= 0 && e <= 1) {
		return nil, 0, fmt.Errorf("label smoothing %v: want a number in [0, 1]", e)
	}
	if len(v.Attrs.Ints) > 1 {
		return nil, 0, fmt.Errorf("want at most one ignore index, got %v", v.Attrs.Ints)
	}
	if ign, ok := CEIgnore(v.Attrs); ok {
		C := x.Shape[len(x.Shape)-1]
		switch {
		case ign < math.MinInt32 || ign > math.MaxInt32:
			return nil, 0, fmt.Errorf("ignore index %d: labels are i32, which cannot hold it", ign)
		case C.Sym == "" && ign >= 0 && ign < C.N:
			return nil, 0, fmt.Errorf("ignore index %d is one of the %d classes, whose targets it would drop: mark ignored targets with a label outside [0,%d), such as PyTorch's default -100 (labels are i32)", ign, C.N, C.N)
		}
	}
	return ir.Shape{}, x.DType, nil
}

// CEIgnore is a cross_entropy's (or ce_grad's) ignore index, and whether
// it has one (Attrs.Ints holds it: none is the zero value).
func CEIgnore(a ir.Attrs) (int, bool) {
	if len(a.Ints) == 1 {
		return a.Ints[0], true
	}
	return 0, false
}

func init() {
	register(
		&Def{Name: "cross_entropy", Kind: Special, NArgs: 2, Infer: ceInfer, Flops: 5,
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("ce_grad", ir.Attrs{F: v.Attrs.F, Ints: v.Attrs.Ints}, v.Args[0], v.Args[1], g), nil}
			}},
		&Def{Name: "ce_grad", Kind: Special, NArgs: 3, Flops: 5,
			Infer: func(v *ir.Value) (ir.Shape, ir.DType, error) {
				if _, _, err := ceInfer(v); err != nil {
					return nil, 0, err
				}
				return v.Args[0].Shape, v.Args[0].DType, nil
			}},
	)
}
