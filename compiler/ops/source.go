package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Sources have storage but no kernel; views reinterpret storage.

func declared(v *ir.Value) (ir.Shape, ir.DType, error) { return v.Shape, v.DType, nil }

func reshapeInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	x := v.Args[0]
	to := v.Attrs.Shape
	if !sameSize(x.Shape, to) {
		return nil, 0, fmt.Errorf("cannot reshape %s (%s elements) to %s (%s elements)", x.Shape, x.Shape.Size(), to, to.Size())
	}
	return to.Clone(), x.DType, nil
}

func sameSize(a, b ir.Shape) bool {
	za, zb := a.Size(), b.Size()
	if za.N != zb.N || len(za.Syms) != len(zb.Syms) {
		return false
	}
	for i := range za.Syms {
		if za.Syms[i] != zb.Syms[i] {
			return false
		}
	}
	return true
}

func init() {
	register(
		&Def{Name: "input", Kind: Source, NArgs: 0, Infer: declared},
		&Def{Name: "param", Kind: Source, NArgs: 0, Infer: declared},
		&Def{Name: "state", Kind: Source, NArgs: 0, Infer: declared},
		&Def{Name: "scalar", Kind: Source, NArgs: 0, Infer: declared},
		&Def{Name: "reshape", Kind: View, NArgs: 1, Infer: reshapeInfer,
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("reshape", ir.Attrs{Shape: v.Args[0].Shape.Clone()}, g)}
			}},
		// flat views its arguments, which must be laid out back to back
		// (the parameters, or their gradients), as one vector.
		&Def{Name: "flat", Kind: View, NArgs: -1,
			Infer: func(v *ir.Value) (ir.Shape, ir.DType, error) {
				var n int64
				for _, a := range v.Args {
					z := a.Shape.Size()
					if len(z.Syms) > 0 {
						return nil, 0, fmt.Errorf("flat needs static shapes, got %s", a.Shape)
					}
					if a.DType != v.Args[0].DType {
						return nil, 0, fmt.Errorf("flat needs one dtype")
					}
					n += z.N
				}
				return ir.Static(int(n)), v.Args[0].DType, nil
			}},
		// segment views elements [Ints[0], Ints[0]+n) of a static vector
		// as a vector of shape Attrs.Shape [n]: a parameter group's slice
		// of an optimizer state vector.
		&Def{Name: "segment", Kind: View, NArgs: 1,
			Infer: func(v *ir.Value) (ir.Shape, ir.DType, error) {
				a := v.Args[0]
				z := a.Shape.Size()
				if len(a.Shape) != 1 || len(z.Syms) > 0 || len(v.Attrs.Ints) != 1 || len(v.Attrs.Shape) != 1 || v.Attrs.Shape[0].Sym != "" {
					return nil, 0, fmt.Errorf("segment needs a static vector, an offset and a length, got %s", a.Type())
				}
				off, n := int64(v.Attrs.Ints[0]), int64(v.Attrs.Shape[0].N)
				if off < 0 || n <= 0 || off+n > z.N {
					return nil, 0, fmt.Errorf("segment [%d, %d) is outside %s", off, off+n, a.Type())
				}
				return v.Attrs.Shape.Clone(), a.DType, nil
			}},
	)
}
