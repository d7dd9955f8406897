package ops

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// MHAOptions are torch.nn.MultiheadAttention's forward options that ngen
// supports.
type MHAOptions struct {
	Heads int
	// Causal masks key j for query i where j > i (the decoder's
	// generate_square_subsequent_mask).
	Causal bool
	// KeyPadding, i32 [B, Tk] or nil, masks keys where it is non-zero.
	KeyPadding *ir.Value
	// Dropout is the attention weights' dropout probability, drawn from
	// Philox stream Stream.
	Dropout float64
	Stream  int
}

// MultiheadAttention lowers torch.nn.MultiheadAttention (batch_first) with
// its parameters: inW [3E, E] and inB [3E] (in_proj_weight, in_proj_bias),
// outW [E, E] and outB [E] (out_proj); biases may be nil. query is
// [B, Tq, E], key and value [B, Tk, E]. The projections are one GEMM for
// self-attention (query, key and value one value: Q, K and V side by side
// in a [B, T, 3E] result), one for the queries and one for keys and values
// when key and value are one value (the decoder's cross-attention), three
// otherwise; the attention core is one attention op that reads the heads
// where the GEMMs put them. The DSL and the op tests share it.
func MultiheadAttention(b *Builder, query, key, value, inW, inB, outW, outB *ir.Value, o MHAOptions) *ir.Value {
	fail := func(format string, args ...any) *ir.Value {
		return layerError(b, "multihead_attention", query, fmt.Errorf(format, args...))
	}
	if len(query.Shape) != 3 || query.Shape[2].Sym != "" {
		return fail("query %s must be [B, T, E] with a static E", query.Shape)
	}
	e := query.Shape[2].N
	if o.Heads <= 0 || e%o.Heads != 0 {
		return fail("embedding size %d is not divisible by %d heads", e, o.Heads)
	}
	for _, x := range []*ir.Value{key, value} {
		if len(x.Shape) != 3 || x.Shape[2] != ir.D(e) || x.Shape[0] != query.Shape[0] {
			return fail("key and value %s must be [%s, T, %d]", x.Shape, query.Shape[0], e)
		}
	}
	if !inW.Shape.Eq(ir.Static(3*e, e)) || (inB != nil && !inB.Shape.Eq(ir.Static(3*e))) {
		return fail("in_proj_weight %s and in_proj_bias, want [%d, %d] and [%d]", inW.Shape, 3*e, e, 3*e)
	}
	if !outW.Shape.Eq(ir.Static(e, e)) || (outB != nil && !outB.Shape.Eq(ir.Static(e))) {
		return fail("out_proj weight %s and bias, want [%d, %d] and [%d]", outW.Shape, e, e, e)
	}
	if m := o.KeyPadding; m != nil && (m.DType != ir.I32 || !m.Shape.Eq(ir.Shape{key.Shape[0], key.Shape[1]})) {
		return fail("key padding mask %s, want i32[%s,%s]", m.Type(), key.Shape[0], key.Shape[1])
	}
	rows := func(x *ir.Value, from, to int) *ir.Value {
		if from == 0 && to == x.Shape[0].N {
			return x
		}
		return b.Op("slice", ir.Attrs{Axes: []int{0}, Ints: []int{from, to}}, x)
	}
	proj := func(x *ir.Value, from, to int) *ir.Value {
		y := b.Op("matmul", ir.Attrs{TransB: true}, x, rows(inW, from, to))
		if inB != nil {
			y = b.Binary("add", y, rows(inB, from, to))
		}
		return y
	}
	var q, k, v *ir.Value
	offs := []int{0, 0, 0}
	switch {
	case query == key && key == value:
		q = proj(query, 0, 3*e)
		k, v, offs = q, q, []int{0, e, 2 * e}
	case key == value:
		q = proj(query, 0, e)
		k = proj(key, e, 3*e)
		v, offs = k, []int{0, 0, e}
	default:
		q, k, v = proj(query, 0, e), proj(key, e, 2*e), proj(value, 2*e, 3*e)
	}
	dh := e / o.Heads
	attrs := ir.Attrs{Ints: []int{o.Heads, dh, offs[0], offs[1], offs[2]}, F: 1 / math.Sqrt(float64(dh)), F2: o.Dropout, I: o.Stream}
	if o.Causal {
		attrs.Str = "causal"
	}
	args := []*ir.Value{q, k, v}
	if o.KeyPadding != nil {
		args = append(args, o.KeyPadding)
	}
	packed := b.Op("attention", attrs, args...)
	if b.Err != nil {
		return query
	}
	att := b.Op("slice", ir.Attrs{Axes: []int{2}, Ints: []int{0, e}}, packed)
	out := b.Op("matmul", ir.Attrs{TransB: true}, att, outW)
	if outB != nil {
		out = b.Binary("add", out, outB)
	}
	return out
}
