package compiler

import "github.com/ngen-ml/ngen/compiler/ir"

// The autocast pass's rules for the Transformers' ops (autocast.go holds
// the pass).
//
// Attention: torch.autocast runs scaled dot-product attention's inputs in
// the half type H (the q·kᵀ and p·v products of the math path are bmm,
// on the lower-precision list), and the fused op follows: q, k and v are
// cast to H, the kernel widens them on load, computes the scores, the
// softmax (max, exp, sum) and the p·v sums in f32, and rounds the output
// to H once, where it is stored. That is the f32 softmax of CUDA
// autocast's list (softmax is an f32 op there); the flash and
// memory-efficient SDPA kernels also keep the scores and the softmax's
// statistics in f32, but round the weights to H for the p·v tensor-core
// product, which this kernel sums from f32 weights. PyTorch 1.13's CPU
// math path (nn.MultiheadAttention
// under torch.autocast("cpu", torch.bfloat16)) rounds more: bmm's scores
// to bf16, and softmax (on neither CPU list) runs on them in bf16, so its
// weights are bf16 too; the oracle test's tolerance covers the
// difference. The log-sum-exp the result carries for backward stays f32
// (its bits in two H elements, ops/attention.go). A key padding mask is
// i32 and untouched. Backward reads H (q, k, v, the output and its
// gradient) and writes H gradients, each widened to f32 by its cast's
// gradient where it meets f32.
//
// -fuse=none expands attention before autocast runs, so its batched
// GEMMs take H operands and give H scores (as the CPU math path), and its
// softmax reads them widened (the f32 list): fused and -fuse=none differ
// there by the scores' rounding, as the f32 plans differ by the order of
// sums.

// castAttention casts attention's q, k and v to h.
func castAttention(v *ir.Value, h ir.DType, cast func(*ir.Value, ir.DType) *ir.Value) {
	for i := 0; i < 3 && i < len(v.Args); i++ {
		if v.Args[i].DType.IsFloat() {
			v.Args[i] = cast(v.Args[i], h)
		}
	}
}

// movesData reports whether v only moves its operands' elements: a
// slice, a permutation, a concatenation, or a slice's gradient (the
// slice's elements placed among zeros). Rounding commutes with moving, so
// these keep an H operand in H rather than widening it to f32 and
// narrowing it again for the next GEMM.
func movesData(v *ir.Value) bool {
	switch v.Op {
	case "slice", "permute", "concat", "slice_bwd":
		return true
	}
	return false
}

// castMoved gives a data-moving op the widest type of its float
// operands: H when all are H, f32 (the others widened) otherwise, as
// torch.cat promotes.
func castMoved(v *ir.Value, h ir.DType, cast func(*ir.Value, ir.DType) *ir.Value) {
	to := ir.DType(-1)
	for _, a := range v.Args {
		switch {
		case !a.DType.IsFloat():
		case a.DType == h && to < 0:
			to = h
		case a.DType != h:
			to = ir.F32
		}
	}
	if to >= 0 {
		castArgs(v, to, cast)
	}
}
