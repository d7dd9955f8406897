package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// cast converts between float types (Attrs.Str names the result's dtype:
// "bf16", "f16", "f32", "f64"); the "autocast" pass inserts it between
// f32 and the 16-bit types, and BatchNorm2d between f32 and f64 (its
// statistics, see BatchNorm2d). f64 casts only to and from f32. Kernels compute
// every float type in float or double (ir.DType.CType) and round a value
// of a 16-bit type to that type where it is computed, so the expression is
// the argument itself: a cast to bf16 rounds through the result's type, a
// cast from bf16 to f32 widens exactly on load. Its gradient is the cast
// back, as torch's `.to(dtype)`'s is.
func init() {
	register(&Def{Name: "cast", Kind: Elementwise, NArgs: 1,
		Infer: func(v *ir.Value) (ir.Shape, ir.DType, error) {
			x := v.Args[0]
			to, err := ir.ParseDType(v.Attrs.Str)
			if err != nil {
				return nil, 0, err
			}
			wide := x.DType == ir.F64 || to == ir.F64
			if !x.DType.IsFloat() || !to.IsFloat() || wide && x.DType != ir.F32 && to != ir.F32 {
				return nil, 0, fmt.Errorf("casts between f32, bf16 and f16, and between f32 and f64, got %s to %s", x.Type(), to)
			}
			return x.Shape, to, nil
		},
		Expr: func(c *Ctx, v *ir.Value, a []string) string { return a[0] },
		Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
			return []*ir.Value{b.Op("cast", ir.Attrs{Str: v.Args[0].DType.String()}, g)}
		},
	})
}
