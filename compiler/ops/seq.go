package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Sequence ops, as index-mapping (Gather) ops over tensors of any rank and
// dtype (dimensions may be symbolic unless a row says otherwise):
//
//   - embedding(W [V,D], ids [...] i32) gathers rows of W: [..., D]. An id
//     outside [0, V) raises the status word (Def.Status) the runtime
//     checks after the function, and reads row 0. Its gradient
//     embedding_bwd(g, ids) → [V, D] is computed per output element by
//     walking the ids in order and adding the rows of g whose id matches:
//     no atomics, the same bits on every run, O(V·D·N) work on the GPU
//     (fine for the character vocabularies of the seed models; a
//     segmented reduction over sorted ids is the way for large
//     vocabularies). The CPU emulation's form sums a whole output row in
//     one pass over the ids, O(V·N + N·D), in the same order;
//   - permute(x) reorders axes (Attrs.Perm: result axis i is x's axis
//     Perm[i]); its gradient is the inverse permutation;
//   - slice(x) keeps [start, end) of one axis (Attrs.Axes = [axis],
//     Attrs.Ints = [start, end]); its gradient slice_bwd pads with zeros
//     back to x's shape (Attrs.Shape);
//   - concat(xs...) joins along Attrs.Axes[0]; its gradient slices.
//
// Select, stack and transpose are compositions (dsl/seq.go).

func embeddingInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	w, ids := v.Args[0], v.Args[1]
	if len(w.Shape) != 2 || w.Shape[0].Sym != "" || w.Shape[1].Sym != "" {
		return nil, 0, fmt.Errorf("weight must be a static [vocab, dim] matrix, got %s", w.Shape)
	}
	if !w.DType.IsFloat() {
		return nil, 0, fmt.Errorf("weight must be float, got %s", w.Type())
	}
	if ids.DType != ir.I32 {
		return nil, 0, fmt.Errorf("token ids must be i32, got %s", ids.Type())
	}
	return append(ids.Shape.Clone(), w.Shape[1]), w.DType, nil
}

func embeddingBwdInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	g, ids := v.Args[0], v.Args[1]
	to := v.Attrs.Shape
	if len(to) != 2 || to[0].Sym != "" || to[1].Sym != "" {
		return nil, 0, fmt.Errorf("weight shape must be a static [vocab, dim], got %s", to)
	}
	if ids.DType != ir.I32 {
		return nil, 0, fmt.Errorf("token ids must be i32, got %s", ids.Type())
	}
	if want := append(ids.Shape.Clone(), to[1]); !g.Shape.Eq(want) {
		return nil, 0, fmt.Errorf("gradient %s does not match ids %s and dim %s (want %s)", g.Shape, ids.Shape, to[1], want)
	}
	return to.Clone(), g.DType, nil
}

// isPerm reports whether p is a permutation of 0..n-1.
func isPerm(p []int, n int) bool {
	if len(p) != n {
		return false
	}
	seen := make([]bool, n)
	for _, a := range p {
		if a < 0 || a >= n || seen[a] {
			return false
		}
		seen[a] = true
	}
	return true
}

func permuteInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	x := v.Args[0]
	if !isPerm(v.Attrs.Perm, len(x.Shape)) {
		return nil, 0, fmt.Errorf("perm %v is not a permutation of the %d axes of %s", v.Attrs.Perm, len(x.Shape), x.Shape)
	}
	out := make(ir.Shape, len(x.Shape))
	for i, a := range v.Attrs.Perm {
		out[i] = x.Shape[a]
	}
	return out, x.DType, nil
}

// inversePerm returns q with q[p[i]] = i.
func inversePerm(p []int) []int {
	q := make([]int, len(p))
	for i, a := range p {
		q[a] = i
	}
	return q
}

// sliceOf checks a slice's attributes against the sliced shape: axis
// (normalised), start and end.
func sliceOf(v *ir.Value, in ir.Shape) (axis, start, end int, err error) {
	if len(v.Attrs.Axes) != 1 || len(v.Attrs.Ints) != 2 {
		return 0, 0, 0, fmt.Errorf("slice needs one axis and [start, end], got axes %v, ints %v", v.Attrs.Axes, v.Attrs.Ints)
	}
	ax, err := ir.NormAxes(v.Attrs.Axes, len(in))
	if err != nil {
		return 0, 0, 0, err
	}
	axis, start, end = ax[0], v.Attrs.Ints[0], v.Attrs.Ints[1]
	d := in[axis]
	if d.Sym != "" {
		return 0, 0, 0, fmt.Errorf("cannot slice the symbolic axis %d of %s", axis, in)
	}
	if start < 0 || end > d.N || start >= end {
		return 0, 0, 0, fmt.Errorf("slice [%d:%d) of axis %d (size %d) of %s is empty or out of range", start, end, axis, d.N, in)
	}
	return axis, start, end, nil
}

func sliceInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	x := v.Args[0]
	axis, start, end, err := sliceOf(v, x.Shape)
	if err != nil {
		return nil, 0, err
	}
	out := x.Shape.Clone()
	out[axis] = ir.D(end - start)
	return out, x.DType, nil
}

func sliceBwdInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	axis, start, end, err := sliceOf(v, v.Attrs.Shape)
	if err != nil {
		return nil, 0, err
	}
	want := v.Attrs.Shape.Clone()
	want[axis] = ir.D(end - start)
	if g := v.Args[0]; !g.Shape.Eq(want) {
		return nil, 0, fmt.Errorf("gradient %s, want %s", g.Shape, want)
	}
	return v.Attrs.Shape.Clone(), v.Args[0].DType, nil
}

// concatAxis checks concat's operands: one dtype and rank, equal but for a
// static concatenation axis.
func concatAxis(v *ir.Value) (int, error) {
	if len(v.Args) == 0 {
		return 0, fmt.Errorf("concat needs at least one operand")
	}
	x0 := v.Args[0]
	if len(v.Attrs.Axes) != 1 {
		return 0, fmt.Errorf("concat needs one axis, got %v", v.Attrs.Axes)
	}
	ax, err := ir.NormAxes(v.Attrs.Axes, len(x0.Shape))
	if err != nil {
		return 0, err
	}
	axis := ax[0]
	if len(v.Args) > len(concatIndexed) {
		return 0, fmt.Errorf("concat takes at most %d operands, got %d", len(concatIndexed), len(v.Args))
	}
	for i, a := range v.Args {
		if a.DType != x0.DType || len(a.Shape) != len(x0.Shape) {
			return 0, fmt.Errorf("operand %d %s does not match operand 0 %s", i, a.Type(), x0.Type())
		}
		for j := range a.Shape {
			if j == axis {
				if a.Shape[j].Sym != "" {
					return 0, fmt.Errorf("operand %d %s: the concatenation axis %d must be static", i, a.Shape, axis)
				}
				continue
			}
			if a.Shape[j] != x0.Shape[j] {
				return 0, fmt.Errorf("operand %d %s and operand 0 %s differ off the concatenation axis %d", i, a.Shape, x0.Shape, axis)
			}
		}
	}
	return axis, nil
}

// concatIndexed marks every operand of concat as indexed (Def.Indexed has
// one entry per operand), up to the most a kernel signature should carry.
var concatIndexed = func() []bool {
	b := make([]bool, 64)
	for i := range b {
		b[i] = true
	}
	return b
}()

func concatInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	axis, err := concatAxis(v)
	if err != nil {
		return nil, 0, err
	}
	out := v.Args[0].Shape.Clone()
	n := 0
	for _, a := range v.Args {
		n += a.Shape[axis].N
	}
	out[axis] = ir.D(n)
	return out, v.Args[0].DType, nil
}

func init() {
	register(
		&Def{Name: "embedding", Kind: Gather, NArgs: 2, Infer: embeddingInfer, Gather: embeddingGather,
			Indexed: []bool{true, true}, Status: "token id",
			RowLen: func(v *ir.Value) int { return v.Args[0].Shape[1].N },
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("embedding_bwd", ir.Attrs{Shape: v.Args[0].Shape.Clone()}, g, v.Args[1]), nil}
			}},
		&Def{Name: "embedding_bwd", Kind: Gather, NArgs: 2, Infer: embeddingBwdInfer, Gather: embeddingBwdGather,
			Indexed: []bool{true, true}, LongThreads: true},
		&Def{Name: "permute", Kind: Gather, NArgs: 1, Moves: true, Infer: permuteInfer, Gather: permuteGather, Indexed: []bool{true},
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("permute", ir.Attrs{Perm: inversePerm(v.Attrs.Perm)}, g)}
			}},
		&Def{Name: "slice", Kind: Gather, NArgs: 1, Moves: true, Infer: sliceInfer, Gather: sliceGather, Indexed: []bool{true},
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				a := ir.Attrs{Axes: append([]int(nil), v.Attrs.Axes...), Ints: append([]int(nil), v.Attrs.Ints...), Shape: v.Args[0].Shape.Clone()}
				return []*ir.Value{b.Op("slice_bwd", a, g)}
			}},
		// slice_bwd pads with zeros; its own gradient (the primitive
		// attention's, which pads its output) slices.
		&Def{Name: "slice_bwd", Kind: Gather, NArgs: 1, Moves: true, Infer: sliceBwdInfer, Gather: sliceBwdGather, Indexed: []bool{true},
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("slice", ir.Attrs{Axes: append([]int(nil), v.Attrs.Axes...), Ints: append([]int(nil), v.Attrs.Ints...)}, g)}
			}},
		&Def{Name: "concat", Kind: Gather, NArgs: -1, Moves: true, Infer: concatInfer, Gather: concatGather,
			Indexed: concatIndexed,
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				axis, _ := concatAxis(v)
				out := make([]*ir.Value, len(v.Args))
				off := 0
				for i, a := range v.Args {
					n := a.Shape[axis].N
					out[i] = b.Op("slice", ir.Attrs{Axes: []int{axis}, Ints: []int{off, off + n}}, g)
					off += n
				}
				return out
			}},
	)
}
