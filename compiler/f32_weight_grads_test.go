package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/transformer"
)

// smallAMPGPT is the gpt at a small size under mixed precision h, built.
func smallAMPGPT(t *testing.T, h dsl.DType) *ir.Model {
	t.Helper()
	c := transformer.GPTConfig()
	c.DModel, c.Heads, c.FF, c.SeqLen, c.MaxLen, c.DecLayers = 12, 3, 20, 5, 8, 2
	m := transformer.NewGPT(c)
	m.Precision(dsl.AMP{Type: h})
	im, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	return im
}

// wgradF32 reports whether v is a GEMM of 16-bit operands that keeps its
// f32 result (f32_weight_grads.go).
func wgradF32(v *ir.Value) bool {
	return v.Op == "matmul" && v.DType == ir.F32 && v.Attrs.Str == "f32" && v.Args[0].DType.IsHalf() && v.Args[1].DType.IsHalf()
}

// TestF32WeightGrads: in the gpt under mixed precision, fused and with
// fusion off, every Linear weight's gradient is its GEMM's f32 result
// (through the batch sum the GEMM performs and reshapes), with no cast
// to f32 left for it, and every other GEMM stays 16-bit; the tied token
// embedding's gradient (a sum of two contributions) keeps its cast.
func TestF32WeightGrads(t *testing.T) {
	const layers = 2 // smallAMPGPT's
	for _, h := range []dsl.DType{dsl.BF16, dsl.F16} {
		for _, fuse := range []bool{true, false} {
			im := smallAMPGPT(t, h)
			p, err := Compile(im, Options{Fuse: fuse})
			if err != nil {
				t.Fatal(err)
			}
			f32, half := 0, 0
			for _, v := range p.Step.Values {
				if v.Op != "matmul" {
					continue
				}
				switch {
				case wgradF32(v):
					f32++
				case v.DType.IsHalf():
					half++
				default:
					t.Errorf("%s fuse=%v: %s", h, fuse, v.LongString())
				}
			}
			folded := 0
			for name, g := range p.Step.Grads {
				b := g
				for b.Op == "reshape" || b.Op == "sum" {
					b = b.Args[0]
				}
				if wgradF32(b) {
					folded++
				} else if len(name) > 7 && name[len(name)-7:] == ".weight" && g.Op == "cast" && g.Args[0].Op != "add" {
					t.Errorf("%s fuse=%v: %s's gradient is still %s", h, fuse, name, g.LongString())
				}
			}
			// Each block's in_proj, out_proj, linear1 and linear2.
			if want := 4 * layers; folded != want || f32 != want || half == 0 {
				t.Errorf("%s fuse=%v: %d weight gradients in f32 from %d GEMMs (%d 16-bit GEMMs), want %d", h, fuse, folded, f32, half, want)
			}
		}
	}
}
