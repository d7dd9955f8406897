package compiler

import (
	"github.com/ngen-ml/ngen/compiler/ir"
)

// foldSumCasts lets a 16-bit sum widen at its kernel's edge under mixed
// precision. Autocast adds a Linear's bias in the half type, so the
// bias's gradient is a 16-bit sum of the output gradient (PyTorch:
// rounded to the half type once), which autodiff then casts back to f32
// for the f32 bias (ToCopyBackward); the cast was a kernel of its own per
// bias (the gpt: 16 a step). Here a sum whose only reader, through
// reshapes, is a widening cast to f32 stores f32 itself: Attrs.Str names
// the half type it rounds through (the kernel sums in float as before,
// rounds to the half type to nearest even, as the 16-bit store did, and
// stores the rounded value widened, as the cast did), so the results are
// the same bits. A sum over the batch of 16-bit products (a GEMM's
// SumBatch, compiler/fuse.go) keeps its type: the GEMM writes it.
func foldSumCasts(p *Program) error {
	for _, f := range p.Funcs() {
		foldFuncSumCasts(f)
	}
	return nil
}

// sameShape reports whether a and b have one shape.
func sameShape(a, b *ir.Value) bool { return a.Shape.Eq(b.Shape) }

func foldFuncSumCasts(f *ir.Func) {
	uses := f.Uses()
	pinned := handedOutSet(f)
	dead := map[*ir.Value]bool{}
	for _, v := range f.Values {
		if v.Op != "sum" || !v.DType.IsHalf() || v.Attrs.Str != "" || pinned[v] || v.Args[0].Op == "matmul" {
			continue
		}
		// v, then the reshapes its one reader chain goes through, then
		// the cast.
		chain := []*ir.Value{v}
		c := v
		for {
			us := uses[c]
			if len(us) != 1 || us[0].Checkpoint != v.Checkpoint || us[0].Phase != v.Phase {
				c = nil
				break
			}
			c = us[0]
			if c.Op != "reshape" || pinned[c] {
				break
			}
			chain = append(chain, c)
		}
		// The cast may be handed out (it is the bias's gradient): the
		// last of the chain takes its place.
		if c == nil || c.Op != "cast" || c.DType != ir.F32 || !sameShape(c, chain[len(chain)-1]) {
			continue
		}
		h := v.DType
		v.Attrs.Str = h.String()
		for _, x := range chain {
			x.DType = ir.F32
		}
		replaceValue(f, uses[c], c, chain[len(chain)-1])
		dead[c] = true
	}
	if len(dead) > 0 {
		dropValues(f, f.Values, dead)
	}
}
