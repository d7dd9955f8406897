package compiler

import (
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// recast makes the backward pass widen a forward value again instead of
// keeping the widened copy: an elementwise or reduction kernel of the
// backward that reads a widening cast of the forward pass (bf16 or f16 to
// f32 under autocast, f32 to f64 in BatchNorm2d's statistics) reads the
// narrow value and converts it itself. A widening is exact, so the
// results are the same bit for bit; what the step keeps alive for the
// backward is the narrow value (half or a quarter of the bytes, or
// nothing more where the narrow value is stored anyway), and the
// conversion costs the reader nothing, since the fuser joins the clone
// to it as an elementwise producer. Each reader gets a clone of its own,
// placed just before it, so that no clone is shared between two backward
// kernels and stored. Readers of other kinds (GEMMs, gathers, loops) read
// their operands from memory and keep the widened value, as before.
func recast(p *Program) error {
	f := p.Step
	if f == nil {
		return nil
	}
	var out []*ir.Value
	n := 0
	for _, v := range f.Values {
		if v.Phase == "bwd" && fusesProducer(v) {
			var mine map[*ir.Value]*ir.Value
			for k, a := range v.Args {
				if !widening(a) || a.Phase != "" {
					continue
				}
				c, ok := mine[a]
				if !ok {
					c = f.NewValue(a.Op, a.DType, a.Shape.Clone(), a.Pos, a.Args[0])
					f.Values = f.Values[:len(f.Values)-1] // placed below
					c.Attrs, c.Phase = a.Attrs, "bwd"
					if mine == nil {
						mine = map[*ir.Value]*ir.Value{}
					}
					mine[a] = c
					out = append(out, c)
					n++
				}
				v.Args[k] = c
			}
		}
		out = append(out, v)
	}
	if n == 0 {
		return nil
	}
	f.Values = out
	f.Renumber()
	return nil
}

// widening reports whether v is a cast to a wider float type.
func widening(v *ir.Value) bool {
	return v.Op == "cast" && v.Role == ir.Temp && v.DType.Size() > v.Args[0].DType.Size()
}

// fusesProducer reports whether v's kernel takes an elementwise producer
// in (an elementwise op or a reduction).
func fusesProducer(v *ir.Value) bool {
	d := ops.Lookup(v.Op)
	return d != nil && (d.Kind == ops.Elementwise || d.Kind == ops.Reduce)
}
