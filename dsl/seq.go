package dsl

import (
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// Sequence ops: token inputs, embeddings, slicing, joining and permuting
// axes, batched matrix products. Each lowers to rows of compiler/ops
// (seq.go there), so the shape rules and their errors are the op table's.

// Tokens declares an i32 token-id input, e.g. m.Tokens("x", dsl.Batch, 64)
// for a batch of sequences of 64 tokens.
func (m *Model) Tokens(name string, shape ...any) *Tensor {
	pos := callerPos()
	return m.source("input", ir.Input, name, ir.I32, dims(m, pos, "tokens", shape), pos)
}

// Embedding is torch.nn.Embedding(vocab, dim) applied to i32 ids of any
// shape: weight [vocab, dim] initialised N(0, 1) as PyTorch does; the
// result is ids' shape + [dim]. An id outside [0, vocab) is an error at
// run time naming this line.
func (m *Model) Embedding(name string, ids *Tensor, vocab, dim int, dt DType) *Tensor {
	pos := callerPos()
	if m.err != nil || m.isNil(pos, "embedding", name, "the token ids", ids) {
		return m.errTensor(ids)
	}
	if vocab < 1 || dim < 1 {
		m.fail(pos, "embedding", "%s: vocabulary %d and dimension %d must be positive", name, vocab, dim)
		return ids
	}
	w := m.declare(ir.Param, "embedding.weight", name+".weight", dt, Normal(0, 1), ir.Static(vocab, dim), pos)
	return m.op(pos, "embedding", ir.Attrs{}, w, ids)
}

// Permute is torch.permute: result axis i is x's axis perm[i].
func Permute(x *Tensor, perm ...int) *Tensor {
	if zero(x) {
		return nil
	}
	return x.m.op(callerPos(), "permute", ir.Attrs{Perm: append([]int(nil), perm...)}, x)
}

// Transpose is torch.transpose: axes a and b swapped (negative axes count
// from the end).
func Transpose(x *Tensor, a, b int) *Tensor {
	if zero(x) {
		return nil
	}
	pos := callerPos()
	n := len(x.v.Shape)
	// Each axis on its own: transposing an axis with itself is the
	// identity, as in torch (NormAxes of both would call it repeated).
	axA, err := ir.NormAxes([]int{a}, n)
	if err == nil {
		var axB []int
		if axB, err = ir.NormAxes([]int{b}, n); err == nil {
			axA = append(axA, axB[0])
		}
	}
	if err != nil {
		x.m.fail(pos, "transpose", "%v", err)
		return x
	}
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	perm[axA[0]], perm[axA[1]] = perm[axA[1]], perm[axA[0]]
	return x.m.op(pos, "permute", ir.Attrs{Perm: perm}, x)
}

// Slice is torch.narrow(x, axis, start, end-start): elements [start, end)
// of one static axis.
func Slice(x *Tensor, axis, start, end int) *Tensor {
	if zero(x) {
		return nil
	}
	return x.m.op(callerPos(), "slice", ir.Attrs{Axes: []int{axis}, Ints: []int{start, end}}, x)
}

// Select is torch.select(x, axis, i): index i of one static axis, which
// the result drops.
func Select(x *Tensor, axis, i int) *Tensor {
	if zero(x) {
		return nil
	}
	pos := callerPos()
	y := x.m.op(pos, "slice", ir.Attrs{Axes: []int{axis}, Ints: []int{i, i + 1}}, x)
	if x.m.err != nil {
		return y
	}
	ax, _ := ir.NormAxes([]int{axis}, len(x.v.Shape))
	s := append(y.v.Shape[:ax[0]:ax[0]], y.v.Shape[ax[0]+1:]...)
	return x.m.op(pos, "reshape", ir.Attrs{Shape: s}, y)
}

// Concat is torch.cat(xs, axis).
func Concat(axis int, xs ...*Tensor) *Tensor {
	if len(xs) == 0 || zero(xs[0]) {
		return nil
	}
	return xs[0].m.op(callerPos(), "concat", ir.Attrs{Axes: []int{axis}}, xs...)
}

// Stack is torch.stack(xs, axis): a new axis of len(xs) at axis.
func Stack(axis int, xs ...*Tensor) *Tensor {
	if len(xs) == 0 || zero(xs[0]) {
		return nil
	}
	m, pos := xs[0].m, callerPos()
	n := len(xs[0].v.Shape) + 1
	ax, err := ir.NormAxes([]int{axis}, n)
	if err != nil {
		m.fail(pos, "stack", "%v", err)
		return xs[0]
	}
	parts := make([]*Tensor, len(xs))
	for i, x := range xs {
		if zero(x) {
			m.fail(pos, "stack", "operand %d is nil", i)
			return m.errTensor(nil)
		}
		if x.m == m && (!x.v.Shape.Eq(xs[0].v.Shape) || x.v.DType != xs[0].v.DType) {
			// Said here, not as the concat of the reshaped operands.
			m.fail(pos, "stack", "operand %d %s differs from operand 0 %s: stack needs equal shapes", i, x.v.Type(), xs[0].v.Type())
			return m.errTensor(nil)
		}
		s := append(append(x.v.Shape[:ax[0]:ax[0]], ir.D(1)), x.v.Shape[ax[0]:]...)
		parts[i] = m.op(pos, "reshape", ir.Attrs{Shape: s}, x)
	}
	return m.op(pos, "concat", ir.Attrs{Axes: []int{ax[0]}}, parts...)
}

// BatchMatMul is torch.matmul whose leading dimensions broadcast in any
// way ([2,1,3,4] × [5,4,6] → [2,5,3,6]), on the batched GEMM.
func BatchMatMul(a, b *Tensor, transA, transB bool) *Tensor {
	if zero(a) || zero(b) {
		return nil
	}
	m, pos := a.m, callerPos()
	if m.err != nil {
		return a
	}
	if b.m != m {
		m.fail(pos, "batch_matmul", "operands belong to different models")
		return a
	}
	m.b.Pos = pos
	y := ops.BatchMatMul(m.b, a.v, b.v, transA, transB)
	if m.b.Err != nil && m.err == nil {
		m.err = m.b.Err
	}
	return &Tensor{m, y}
}
