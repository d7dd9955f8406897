package ops

import (
	"fmt"

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
	return ir.Shape{}, x.DType, nil
}

func init() {
	register(
		&Def{Name: "cross_entropy", Kind: Special, NArgs: 2, Infer: ceInfer, Flops: 5,
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("ce_grad", ir.Attrs{F: v.Attrs.F}, v.Args[0], v.Args[1], g), nil}
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
