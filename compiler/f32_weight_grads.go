package compiler

import (
	"github.com/ngen-ml/ngen/compiler/ir"
)

// f32WeightGrads writes each weight's gradient straight into the f32
// gradient under mixed precision. Autocast's F.linear backward computes a
// weight's gradient as a 16-bit GEMM (16-bit operands, products summed in
// f32, the result rounded to 16 bits), which ToCopyBackward then widens to
// the f32 weight's gradient: a cast kernel per weight a step (the gpt: 24
// of them, [1024, 256] and the like) and a 16-bit copy of every weight
// gradient. Here a GEMM of 16-bit operands whose only reader, through its
// sum over the batch (when that sum is one larger GEMM, kConcat) and
// reshapes, is the widening cast that is a parameter's gradient stores
// f32 itself (matmul's Attrs.Str "f32"; cuBLAS's cublasGemmEx with an f32
// C, oneDNN's bf16 matmul with an f32 destination), and the cast is gone.
//
// That is not autocast's arithmetic: the gradient keeps the f32 sums
// instead of their rounding to 16 bits, within half a 16-bit ulp of it
// (Megatron-LM's gradient-accumulation fusion does the same: its weight
// gradient GEMMs accumulate into the f32 main_grad). So the pass is part
// of the mixed-precision policy, not an optimisation: it runs with fusion
// off too, and fused and -fuse=none plans stay bit for bit alike.
func f32WeightGrads(p *Program) error {
	if p.Step == nil {
		return nil
	}
	f := p.Step
	uses := f.Uses()
	dead := map[*ir.Value]bool{}
	for _, g := range f.Grads {
		if g.Op != "cast" || g.DType != ir.F32 || !g.Args[0].DType.IsHalf() {
			continue
		}
		// Walk back from the cast through reshapes and the batch sum to
		// the product, each read by nothing else.
		var chain []*ir.Value // from the product to the cast's argument
		x := g.Args[0]
		ok := len(uses[x]) == 1
		for ok && x.Op == "reshape" {
			chain = append([]*ir.Value{x}, chain...)
			x = x.Args[0]
			ok = len(uses[x]) == 1
		}
		if ok && x.Op == "sum" {
			m := x.Args[0]
			if len(uses[m]) != 1 || !kConcat(m) || !sumsBatch(x, m) {
				continue
			}
			chain = append([]*ir.Value{x}, chain...)
			x = m
		}
		if !ok || x.Op != "matmul" || !x.DType.IsHalf() || x.Attrs.Str != "" {
			continue
		}
		x.Attrs.Str, x.DType = ir.F32.String(), ir.F32
		for _, c := range chain {
			c.DType = ir.F32
		}
		last := x
		if len(chain) > 0 {
			last = chain[len(chain)-1]
		}
		replaceValue(f, uses[g], g, last) // the gradient, and the optimizer's flat gradient reading it
		dead[g] = true
	}
	if len(dead) > 0 {
		dropValues(f, f.Values, dead)
	}
	return nil
}

// sumsBatch reports whether sum s reduces exactly product m's batch dims
// (the sum batchSum lets join the product's GEMM).
func sumsBatch(s, m *ir.Value) bool {
	axes, err := ir.NormAxes(s.Attrs.Axes, len(m.Shape))
	if err != nil || len(m.Shape) < 3 || len(axes) != len(m.Shape)-2 {
		return false
	}
	for i, ax := range axes {
		if ax != i {
			return false
		}
	}
	return true
}
