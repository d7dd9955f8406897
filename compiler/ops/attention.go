package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Scaled dot-product attention over H heads as one flash-style kernel
// (Kind Loop; the templates are in attention_templates.go):
//
//	attention(q [B,Tq,Wq], k [B,Tk,Wk], v [B,Tk,Wv] [, kpm i32 [B,Tk]])
//	  → [B, Tq, H·dh + H]
//
// Attrs.Ints = [H, dh, qoff, koff, voff]: head h of the queries is columns
// qoff + h·dh ... of q (likewise keys and values), so the packed
// projections of torch.nn.MultiheadAttention (one [B,T,3E] GEMM result
// for self-attention) are read where they lie, without permutes. k and v
// (and q) may be one value. Attrs.F is the score scale (1/√dh),
// Attrs.Str "causal" masks key j > query i, kpm masks keys where it is
// non-zero (PyTorch's key_padding_mask), Attrs.F2 is the dropout
// probability of the attention weights and Attrs.I its Philox stream,
// drawn at the index ((b·H + h)·Tq + i)·Tk + j of the [B,H,Tq,Tk] weights,
// as an unfused dropout over them draws.
//
// Each row of the result holds the output of every head ([Tq, H·dh] as
// PyTorch concatenates heads before out_proj), then the log-sum-exp of
// each head's scores: all the forward keeps for backward, O(T) memory,
// never the T×T scores. The log-sum-exp stays f32 in a 16-bit result
// (mixed precision): its bits fill two elements per head (high half
// first), since a log-sum-exp rounded to bf16 (off by up to |lse|·2^-9)
// would scale every recomputed weight of the row in backward. A query with every key masked gets output 0 (and
// log-sum-exp +inf, so its weights are 0 in backward): PyTorch gives NaN.
//
// attention_bwd(gO, q, k, v, out [, kpm]) recomputes the scores tile by
// tile (flash-attention backward) and returns the gradient of one source
// value S (Attrs.Ints[5]: bit 0 q, bit 1 k, bit 2 v say which of its
// roles S plays), shaped as S. Its work items are query tiles (dq, summed
// over key tiles) and key tiles (dk and dv, summed over query tiles), so
// no two blocks add into one element: no atomics, the same bits on every
// run. gO is the gradient of the packed result or of its output part.

// attnDims are attention's static sizes.
type attnDims struct {
	H, Dh, QOff, KOff, VOff int
	Tq, Tk                  int
	B                       ir.Dim
	D                       int // H·dh
	LseW                    int // the log-sum-exp columns: H, 2H for a 16-bit result
}

func attentionDims(v *ir.Value) (attnDims, error) {
	var a attnDims
	if len(v.Attrs.Ints) < 5 {
		return a, fmt.Errorf("attention needs Ints [H, dh, qoff, koff, voff], got %v", v.Attrs.Ints)
	}
	a.H, a.Dh, a.QOff, a.KOff, a.VOff = v.Attrs.Ints[0], v.Attrs.Ints[1], v.Attrs.Ints[2], v.Attrs.Ints[3], v.Attrs.Ints[4]
	if a.H <= 0 || a.Dh <= 0 {
		return a, fmt.Errorf("heads %d and head size %d must be positive", a.H, a.Dh)
	}
	a.D = a.H * a.Dh
	a.LseW = a.H * lseSlots(v.Args[0].DType)
	q, k, val := v.Args[0], v.Args[1], v.Args[2]
	for i, s := range []struct {
		x   *ir.Value
		off int
	}{{q, a.QOff}, {k, a.KOff}, {val, a.VOff}} {
		x := s.x
		if len(x.Shape) != 3 || x.Shape[1].Sym != "" || x.Shape[2].Sym != "" {
			return a, fmt.Errorf("operand %d %s must be [B, T, width] with static T and width", i, x.Shape)
		}
		if x.DType != q.DType || !x.DType.IsFloat() {
			return a, fmt.Errorf("operands must share a float dtype, got %s and %s", q.Type(), x.Type())
		}
		if x.Shape[0] != q.Shape[0] {
			return a, fmt.Errorf("operand %d %s and the queries %s differ in batch", i, x.Shape, q.Shape)
		}
		if s.off < 0 || s.off+a.D > x.Shape[2].N {
			return a, fmt.Errorf("columns [%d, %d) of operand %d %s are out of range", s.off, s.off+a.D, i, x.Shape)
		}
	}
	a.B, a.Tq, a.Tk = q.Shape[0], q.Shape[1].N, k.Shape[1].N
	if val.Shape[1].N != a.Tk {
		return a, fmt.Errorf("keys %s and values %s differ in length", k.Shape, val.Shape)
	}
	if s := v.Attrs.Str; s != "" && s != "causal" {
		return a, fmt.Errorf("unknown mask %q (causal)", s)
	}
	if p := v.Attrs.F2; p < 0 || p >= 1 {
		return a, fmt.Errorf("dropout probability %g outside [0, 1)", p)
	}
	// Each distinct operand's columns are exactly its roles' heads, so
	// that the gradient of one operand is one kernel's whole result.
	for _, x := range []*ir.Value{q, k, val} {
		if n := len(roles(v, x)); x.Shape[2].N != n*a.D {
			return a, fmt.Errorf("operand %s plays %d roles of width %d: its width must be %d", x.Shape, n, a.D, n*a.D)
		}
	}
	if tileFor(a.Dh, q.DType) == 0 {
		return a, fmt.Errorf("head size %d is too large for the kernel's shared memory", a.Dh)
	}
	return a, nil
}

// lseSlots is the elements of a dt result that hold one f32 log-sum-exp.
func lseSlots(dt ir.DType) int {
	if dt.IsHalf() {
		return 2
	}
	return 1
}

// roles lists which of q (0), k (1), v (2) operand x is.
func roles(v, x *ir.Value) []int {
	var r []int
	for i := 0; i < 3; i++ {
		if v.Args[i] == x {
			r = append(r, i)
		}
	}
	return r
}

func checkKPM(v *ir.Value, i int, a attnDims) error {
	if len(v.Args) <= i {
		return nil
	}
	if m := v.Args[i]; m.DType != ir.I32 || !m.Shape.Eq(ir.Shape{a.B, ir.D(a.Tk)}) {
		return fmt.Errorf("key padding mask %s, want i32[%s,%d]", m.Type(), a.B, a.Tk)
	}
	return nil
}

func attentionInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	if len(v.Args) != 3 && len(v.Args) != 4 {
		return nil, 0, fmt.Errorf("attention takes 3 or 4 arguments, got %d", len(v.Args))
	}
	a, err := attentionDims(v)
	if err != nil {
		return nil, 0, err
	}
	if err := checkKPM(v, 3, a); err != nil {
		return nil, 0, err
	}
	return ir.Shape{a.B, ir.D(a.Tq), ir.D(a.D + a.LseW)}, v.Args[0].DType, nil
}

// bwdView is the forward attention value seen from its backward op
// (whose operands are gO first).
func bwdView(v *ir.Value) *ir.Value {
	f := &ir.Value{Op: "attention", Args: v.Args[1:4], Attrs: v.Attrs}
	if len(v.Args) > 5 {
		f.Args = append(f.Args[:3:3], v.Args[5])
	}
	return f
}

func attentionBwdInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	if len(v.Args) != 5 && len(v.Args) != 6 || len(v.Attrs.Ints) != 6 {
		return nil, 0, fmt.Errorf("attention_bwd takes 5 or 6 arguments and 6 Ints")
	}
	f := bwdView(v)
	a, err := attentionDims(f)
	if err != nil {
		return nil, 0, err
	}
	if err := checkKPM(f, 3, a); err != nil {
		return nil, 0, err
	}
	g, out := v.Args[0], v.Args[4]
	if !out.Shape.Eq(ir.Shape{a.B, ir.D(a.Tq), ir.D(a.D + a.LseW)}) || out.DType != f.Args[0].DType {
		return nil, 0, fmt.Errorf("forward result %s does not match", out.Shape)
	}
	if !g.Shape.Eq(out.Shape) && !g.Shape.Eq(ir.Shape{a.B, ir.D(a.Tq), ir.D(a.D)}) || !g.DType.IsFloat() {
		return nil, 0, fmt.Errorf("gradient %s, want %s or its output part", g.Shape, out.Shape)
	}
	src := attnSource(v)
	if src == nil {
		return nil, 0, fmt.Errorf("roles %b name no operand", v.Attrs.Ints[5])
	}
	return src.Shape.Clone(), src.DType, nil
}

// attnSource is the operand whose gradient attention_bwd v computes.
func attnSource(v *ir.Value) *ir.Value {
	m := v.Attrs.Ints[5]
	for i := 0; i < 3; i++ {
		if m&(1<<i) != 0 {
			return v.Args[1+i]
		}
	}
	return nil
}

func attentionGrad(b *Builder, v, g *ir.Value) []*ir.Value {
	// The gradient of the output part alone, padded with zeros for the
	// log-sum-exp columns, is read unpadded.
	a, _ := attentionDims(v)
	if g.Op == "slice_bwd" && g.Attrs.Axes[0] == 2 && g.Attrs.Ints[0] == 0 && g.Attrs.Ints[1] == a.D {
		g = g.Args[0]
	}
	out := make([]*ir.Value, len(v.Args))
	for i := 0; i < 3; i++ {
		x := v.Args[i]
		rs := roles(v, x)
		if rs[0] != i {
			continue // its gradient comes with its first role
		}
		mask := 0
		for _, r := range rs {
			mask |= 1 << r
		}
		attrs := v.Attrs
		attrs.Ints = append(append([]int(nil), v.Attrs.Ints[:5]...), mask)
		args := []*ir.Value{g, v.Args[0], v.Args[1], v.Args[2], v}
		if len(v.Args) > 3 {
			args = append(args, v.Args[3])
		}
		out[i] = b.Op("attention_bwd", attrs, args...)
	}
	return out
}

// attentionExpand is the primitive form: per-head views, a batched GEMM
// for the scores, the masked softmax, dropout, a batched GEMM for the
// output. It leaves the log-sum-exp columns zero: only the fused
// backward reads them, and the expansion has its own backward.
func attentionExpand(b *Builder, v *ir.Value) *ir.Value {
	a, _ := attentionDims(v)
	heads := func(x *ir.Value, off, t int) *ir.Value {
		s := b.Op("slice", ir.Attrs{Axes: []int{2}, Ints: []int{off, off + a.D}}, x)
		if off == 0 && x.Shape[2].N == a.D {
			s = x
		}
		r := b.Op("reshape", ir.Attrs{Shape: ir.Shape{a.B, ir.D(t), ir.D(a.H), ir.D(a.Dh)}}, s)
		return b.Op("permute", ir.Attrs{Perm: []int{0, 2, 1, 3}}, r) // [B,H,T,dh]
	}
	q := heads(v.Args[0], a.QOff, a.Tq)
	k := heads(v.Args[1], a.KOff, a.Tk)
	val := heads(v.Args[2], a.VOff, a.Tk)
	s := b.Scale(b.Op("matmul", ir.Attrs{TransB: true}, q, k), v.Attrs.F)
	sm := []*ir.Value{s}
	if len(v.Args) > 3 {
		sm = append(sm, v.Args[3])
	}
	p := b.Op("softmax", ir.Attrs{Axes: []int{-1}, Str: v.Attrs.Str}, sm...)
	if v.Attrs.F2 > 0 {
		p = b.Op("dropout", ir.Attrs{F: v.Attrs.F2, I: v.Attrs.I}, p)
	}
	o := b.Op("permute", ir.Attrs{Perm: []int{0, 2, 1, 3}}, b.Op("matmul", ir.Attrs{}, p, val)) // [B,Tq,H,dh]
	o = b.Op("reshape", ir.Attrs{Shape: ir.Shape{a.B, ir.D(a.Tq), ir.D(a.D)}}, o)
	return b.Op("slice_bwd", ir.Attrs{Axes: []int{2}, Ints: []int{0, a.D}, Shape: v.Shape.Clone()}, o)
}

func init() {
	register(
		&Def{Name: "attention", Kind: Loop, NArgs: -1, Infer: attentionInfer, Loop: attentionFwdLoop,
			Grad: attentionGrad, Expand: attentionExpand, Blocks: attentionFwdBlocks, Tensor: attentionFwdTensor},
		&Def{Name: "attention_bwd", Kind: Loop, NArgs: -1, Infer: attentionBwdInfer, Loop: attentionBwdLoop,
			Blocks: attentionBwdBlocks, Tensor: attentionBwdTensor},
	)
}
