package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// matmul is torch.matmul on operands of rank ≥ 2 with optional transposes of
// the last two dims; leading (batch) dims broadcast. Codegen lowers it to
// the device's GEMM.

// MatDims returns M, K of op(A) or K, N of op(B): the last two dims, swapped
// when transposed.
func MatDims(s ir.Shape, trans bool) (rows, cols ir.Dim) {
	r, c := s[len(s)-2], s[len(s)-1]
	if trans {
		return c, r
	}
	return r, c
}

func matmulInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	a, b := v.Args[0], v.Args[1]
	if a.DType != b.DType || !a.DType.IsFloat() {
		return nil, 0, fmt.Errorf("operands must share a float dtype, got %s and %s", a.Type(), b.Type())
	}
	if len(a.Shape) < 2 || len(b.Shape) < 2 {
		return nil, 0, fmt.Errorf("operands must have rank ≥ 2, got %s and %s", a.Shape, b.Shape)
	}
	m, k := MatDims(a.Shape, v.Attrs.TransA)
	k2, n := MatDims(b.Shape, v.Attrs.TransB)
	if k != k2 {
		return nil, 0, fmt.Errorf("inner dimensions differ: %s × %s (%s vs %s)", a.Shape, b.Shape, k, k2)
	}
	batch, err := ir.Broadcast(a.Shape[:len(a.Shape)-2], b.Shape[:len(b.Shape)-2])
	if err != nil {
		return nil, 0, err
	}
	dt := a.DType
	if v.Attrs.Str != "" {
		// 16-bit operands, an f32 result (compiler/f32_weight_grads.go).
		if v.Attrs.Str != ir.F32.String() || !a.DType.IsHalf() {
			return nil, 0, fmt.Errorf("result type %q of %s operands: want f32 of 16-bit operands", v.Attrs.Str, a.DType)
		}
		dt = ir.F32
	}
	return append(batch.Clone(), m, n), dt, nil
}

func matmulGrad(b *Builder, v, g *ir.Value) []*ir.Value {
	A, B := v.Args[0], v.Args[1]
	tA, tB := v.Attrs.TransA, v.Attrs.TransB
	mm := func(x, y *ir.Value, ta, tb bool) *ir.Value {
		return b.Op("matmul", ir.Attrs{TransA: ta, TransB: tb}, x, y)
	}
	var dA, dB *ir.Value
	if !tA {
		dA = mm(g, B, false, !tB)
	} else {
		dA = mm(B, g, tB, true)
	}
	if !tB {
		dB = mm(A, g, !tA, false)
	} else {
		dB = mm(g, A, true, tA)
	}
	return []*ir.Value{b.SumTo(dA, A.Shape), b.SumTo(dB, B.Shape)}
}

func init() {
	register(&Def{Name: "matmul", Kind: MatMul, NArgs: 2, Infer: matmulInfer, Grad: matmulGrad})
}
