package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Recurrent lowers one layer of torch.nn.RNN or torch.nn.LSTM over a
// batch-first x [B,T,E] with PyTorch's parameters: wih [G·H,E], whh
// [G·H,H], bih and bhh [G·H] (nil for none), gate order i, f, g, o. h0 and
// c0 are [B,H] initial states, nil for zeros (c0 is ignored by the RNN
// cells). It returns the output of every step [B,T,H] and the final
// states [B,H] (cn nil for the RNN cells).
//
// The input projection of all steps is one GEMM (its bias adds fuse into
// the GEMM's epilogue kernel); the recurrence is one rnn_scan.
func Recurrent(b *Builder, cell string, x, wih, whh, bih, bhh, h0, c0 *ir.Value) (out, hn, cn *ir.Value) {
	return MaskedRecurrent(b, cell, x, wih, whh, bih, bhh, h0, c0, nil)
}

// MaskedRecurrent is Recurrent with an i32 step mask [B,T] (nil for none):
// where it is 0 the state carries over unchanged, so a left-padded
// sequence's final state is exactly that of its tokens.
func MaskedRecurrent(b *Builder, cell string, x, wih, whh, bih, bhh, h0, c0, mask *ir.Value) (out, hn, cn *ir.Value) {
	c, ok := Cells[cell]
	if !ok {
		return layerError(b, "recurrent", x, fmt.Errorf("unknown cell %q", cell)), nil, nil
	}
	if len(x.Shape) != 3 || x.Shape[1].Sym != "" || x.Shape[2].Sym != "" {
		return layerError(b, cell, x, fmt.Errorf("input %s must be [B, T, features] with static T and features", x.Shape)), nil, nil
	}
	if len(whh.Shape) != 2 || whh.Shape[1].Sym != "" {
		return layerError(b, cell, x, fmt.Errorf("recurrent weight %s must be [%d·H, H]", whh.Shape, c.Gates)), nil, nil
	}
	B, T, H := x.Shape[0], x.Shape[1].N, whh.Shape[1].N
	e := x.Shape[2].N
	if !wih.Shape.Eq(ir.Static(c.Gates*H, e)) {
		return layerError(b, cell, x, fmt.Errorf("input weight %s, want [%d, %d]", wih.Shape, c.Gates*H, e)), nil, nil
	}
	for _, bias := range []*ir.Value{bih, bhh} {
		if bias != nil && !bias.Shape.Eq(ir.Static(c.Gates*H)) {
			return layerError(b, cell, x, fmt.Errorf("bias %s, want [%d]", bias.Shape, c.Gates*H)), nil, nil
		}
	}
	state := ir.Shape{B, ir.D(H)}
	zero := func() *ir.Value {
		return b.Op("fill", ir.Attrs{F: 0, Shape: state.Clone(), Str: x.DType.String()})
	}
	for _, s := range []*ir.Value{h0, c0} {
		if s != nil && !s.Shape.Eq(state) {
			return layerError(b, cell, x, fmt.Errorf("initial state %s, want %s", s.Shape, state)), nil, nil
		}
	}
	if h0 == nil {
		h0 = zero()
	}
	if c0 == nil || c.Gates == 1 {
		c0 = h0
		if c.Gates == 4 {
			c0 = zero()
		}
	}
	xp := b.Op("matmul", ir.Attrs{TransB: true}, x, wih) // [B,T,G·H]
	for _, bias := range []*ir.Value{bih, bhh} {
		if bias != nil {
			xp = b.Op("add", ir.Attrs{}, xp, bias)
		}
	}
	args := []*ir.Value{xp, whh, h0, c0}
	if mask != nil {
		args = append(args, mask)
	}
	s := b.Op("rnn_scan", ir.Attrs{Str: cell}, args...)
	if b.Err != nil {
		return x, nil, nil
	}
	slice := func(v *ir.Value, axis, from, to int) *ir.Value {
		return b.Op("slice", ir.Attrs{Axes: []int{axis}, Ints: []int{from, to}}, v)
	}
	last := func(v *ir.Value) *ir.Value {
		return b.Op("reshape", ir.Attrs{Shape: state.Clone()}, slice(v, 1, T-1, T))
	}
	out = slice(s, 2, 0, H)
	hn = last(out)
	if c.Gates == 4 {
		cn = last(slice(s, 2, H, 2*H))
	}
	return out, hn, cn
}
