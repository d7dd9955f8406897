package compiler

import (
	"github.com/ngen-ml/ngen/compiler/ir"
)

// foldNormCasts lets the LayerNorm kernels convert at their edges under
// mixed precision, as the policy asks of fused kernels: autocast
// computes layer_norm in f32 and casts its output to the half type for
// the GEMM that reads it, and autodiff casts that GEMM's 16-bit input
// gradient back to f32 for layernorm_bwd. Each cast was a kernel of its
// own (the gpt: 9 of each a step, [B, T, 256] each). Here
//
//   - a layernorm whose only reader is a narrowing cast to H writes H
//     itself (Attrs.Str names the output type; the kernel computes in
//     f32 and its store rounds to nearest even, as the cast's does), and
//   - a layernorm_bwd whose gradient operand is a widening cast from H,
//     read by nothing else, reads the H gradient and widens it itself.
//
// A conversion at the kernel's edge is the cast's conversion, so the
// results are the same bits. With fusion off the pass does not run (the
// layernorms are expanded into primitives there anyway).
func foldNormCasts(p *Program) error {
	for _, f := range p.Funcs() {
		foldFuncNormCasts(f)
	}
	return nil
}

func foldFuncNormCasts(f *ir.Func) {
	uses := f.Uses()
	pinned := handedOutSet(f)
	dead := map[*ir.Value]bool{}
	for _, v := range f.Values {
		switch v.Op {
		case "layernorm":
			us := uses[v]
			if v.DType != ir.F32 || v.Attrs.Str != "" || pinned[v] || len(us) != 1 {
				continue
			}
			c := us[0]
			if c.Op != "cast" || !c.DType.IsHalf() || pinned[c] || c.Checkpoint != v.Checkpoint || c.Phase != v.Phase {
				continue
			}
			v.DType, v.Attrs.Str = c.DType, c.DType.String()
			replaceValue(f, uses[c], c, v)
			dead[c] = true
		case "layernorm_bwd":
			g := v.Args[0]
			if g.Op != "cast" || g.DType != ir.F32 || !g.Args[0].DType.IsHalf() || pinned[g] || len(uses[g]) != 1 {
				continue
			}
			v.Args[0] = g.Args[0]
			dead[g] = true
		}
	}
	if len(dead) > 0 {
		dropValues(f, f.Values, dead)
	}
}
