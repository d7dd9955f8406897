package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/dsl"
)

// TestFoldSumCasts: in the gpt under mixed precision every bias's
// gradient, a 16-bit sum autodiff then widened, is a sum that stores f32
// itself (rounding through the half type), with no cast left and the
// bias gradient handed out as that sum; with the pass off each is still
// a 16-bit sum and a cast. A 16-bit sum over a batch of GEMM products (a
// weight gradient) keeps its type. models/transformer's
// TestFoldCastsExact checks the same bits.
func TestFoldSumCasts(t *testing.T) {
	const layers = 2 // smallAMPGPT's
	for _, h := range []dsl.DType{dsl.BF16, dsl.F16} {
		im := smallAMPGPT(t, h)
		ht := im.Precision.Type
		for _, off := range []bool{false, true} {
			opts := Options{Fuse: true}
			if off {
				opts.Off = []string{"fold_sum_casts"}
			}
			p, err := Compile(im, opts)
			if err != nil {
				t.Fatal(err)
			}
			// base follows reshapes back to what they view.
			base := func(v *ir.Value) *ir.Value {
				for v.Op == "reshape" {
					v = v.Args[0]
				}
				return v
			}
			biases, folded := 0, 0
			for name, g := range p.Step.Grads {
				if len(name) < 5 || name[len(name)-5:] != ".bias" || g.DType != ir.F32 {
					continue
				}
				b := base(g)
				switch {
				case b.Op == "sum" && b.Attrs.Str == ht.String():
					biases++
					folded++
				case b.Op == "cast" && base(b.Args[0]).Op == "sum" && base(b.Args[0]).DType == ht:
					biases++
				case b.Op == "sum" && b.Attrs.Str == "" && b.Args[0].DType == ir.F32:
					// A LayerNorm's bias: summed in f32 already.
				default:
					t.Errorf("%s off=%v: %s's gradient is %s", ht, off, name, b.LongString())
				}
			}
			for _, v := range p.Step.Values {
				if v.Op == "sum" && v.Args[0].Op == "matmul" && v.Attrs.Str != "" {
					t.Errorf("%s: a GEMM's batch sum %s was folded", ht, v.LongString())
				}
			}
			// Each block's out_proj, linear1 and linear2 biases (the
			// attention's in_proj_bias is not named *.bias; the
			// LayerNorms' are f32 sums already).
			want := 3 * layers
			if off {
				want = 0
			}
			if folded != want || biases != 3*layers {
				t.Errorf("%s off=%v: %d of %d bias gradients folded, want %d", ht, off, folded, biases, want)
			}
		}
	}
}
