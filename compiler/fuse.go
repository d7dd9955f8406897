package compiler

import (
	"slices"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// fuse partitions each function's computed values into kernel groups.
// With fusion on:
//   - elementwise ops over the same iteration space join one kernel, so a
//     GEMM's bias, activation and dropout become one epilogue kernel and
//     the optimizer update over the flat parameter vector becomes one
//     multi-tensor kernel;
//   - a reduction absorbs the elementwise group that produces its input
//     (activation backward + bias-gradient reduction), and reductions over
//     the same space and axes share one pass with the elementwise ops that
//     feed them (batch norm's statistics and its backward sums;
//     reduce_siblings.go);
//   - an elementwise op with no producer to join shares the latest kernel
//     over the same space (horizontal fusion);
//   - cross_entropy absorbs the elementwise group producing its logits and
//     its own gradient ce_grad, so one kernel yields loss and dlogits;
//   - a GEMM batched over samples whose only use is a sum over those
//     samples (a convolution's weight gradient) accumulates into the sum
//     directly, so the per-sample products are never stored;
//   - a gather (pooling, im2col, col2im) joins an elementwise kernel over
//     its output space when the arguments it indexes are already in memory,
//     and elementwise consumers join it (pooling backward + ReLU backward).
//
// With fusion off every op is its own kernel. A value may join a group only
// if everything else it reads is computed by an earlier group, which keeps
// the kernel order a topological order, and only a group of its own phase:
// the optimizer's values (phase "opt") run after the gradient/update
// boundary (Func.UpdateFrom), everything else before it. An unbatched
// model's gradient has the flat parameter vector's shape, and joining the
// update's kernel horizontally moved it past the boundary.
func fuse(p *Program) error {
	for _, f := range p.Funcs() {
		p.Groups[f] = fuseFunc(f, p.Fuse)
		finishGroups(f, p.Groups[f])
	}
	return nil
}

func fuseFunc(f *ir.Func, on bool) []*Group {
	uses := f.Uses()
	var gs []*Group
	owner := map[*ir.Value]int{}
	optGroup := map[*Group]bool{} // a group of the update phase
	add := func(g *Group, v *ir.Value) {
		g.Values = append(g.Values, v)
		for i, h := range gs {
			if h == g {
				owner[v] = i
			}
		}
	}
	newGroup := func(g *Group, v *ir.Value) {
		gs = append(gs, g)
		optGroup[g] = v.Phase == "opt"
		add(g, v)
	}
	// ready reports whether every argument of v outside group gi comes from
	// an earlier group (or needs no kernel).
	ready := func(v *ir.Value, gi int, skip ...*ir.Value) bool {
		if gi < len(gs) && optGroup[gs[gi]] != (v.Phase == "opt") {
			return false
		}
	args:
		for _, a := range v.Args {
			for _, s := range skip {
				if a == s {
					continue args
				}
			}
			if gi < len(gs) && gs[gi].has(a) {
				continue
			}
			for _, s := range storageOf(a) {
				if og, ok := owner[s]; ok && og >= gi {
					return false
				}
			}
		}
		return true
	}
	users := usersOf(f)
	for _, v := range f.Values {
		d := ops.Lookup(v.Op)
		if d.Kind == ops.Source || d.Kind == ops.View || isConst(v) {
			continue
		}
		switch d.Kind {
		case ops.Elementwise:
			// A backward widening of a forward value (the recast pass)
			// joins the latest open backward kernel over its space, else
			// starts one; its reader, next in the list, joins it there.
			// Joining a forward kernel, or feeding a reduction, would
			// store the wide value for the reader.
			if on && isRecast(v) {
				gi := len(gs) - 1
				for ; gi >= 0; gi-- {
					if g := gs[gi]; !g.closed && g.Kind == EW && g.Space.Eq(v.Shape) && ready(v, gi) {
						break
					}
				}
				if gi >= 0 && backwardOnly(gs[gi]) {
					add(gs[gi], v)
				} else {
					newGroup(&Group{Kind: EW, Space: v.Shape, Root: v}, v)
				}
				continue
			}
			if on {
				best := -1
				for _, a := range v.Args {
					gi, ok := owner[a]
					if !ok || gs[gi].closed || gs[gi].Kind != EW || !gs[gi].Space.Eq(v.Shape) {
						continue
					}
					if gi > best && ready(v, gi) {
						best = gi
					}
				}
				// Feeding a sibling reduction beats joining a producer
				// that holds a gather, which no reduction absorbs.
				if best < 0 || hasGather(gs[best]) {
					if gi := prologueGroup(gs, users, v, ready); gi >= 0 {
						add(gs[gi], v)
						continue
					}
				}
				// With no producer to join, fuse horizontally with the
				// latest kernel over the same space (the optimizer's
				// independent state updates).
				for gi := len(gs) - 1; best < 0 && gi >= 0; gi-- {
					g := gs[gi]
					if !g.closed && g.Kind == EW && g.Space.Eq(v.Shape) && ready(v, gi) {
						best = gi
					}
				}
				if best >= 0 {
					add(gs[best], v)
					continue
				}
			}
			newGroup(&Group{Kind: EW, Space: v.Shape, Root: v}, v)
		case ops.Gather:
			if on {
				if gi := gatherGroup(gs, owner, v, d, ready); gi >= 0 {
					add(gs[gi], v)
					continue
				}
			}
			newGroup(&Group{Kind: EW, Space: v.Shape, Root: v}, v)
		case ops.Reduce:
			x := v.Args[0]
			if gi, ok := owner[x]; (on || sumBatchAlways(v)) && ok && batchSum(gs[gi], v, uses) {
				gs[gi].SumBatch = v
				add(gs[gi], v)
				continue
			}
			if gi, ok := owner[x]; on && ok && gs[gi].Kind == EW && !gs[gi].closed && gs[gi].Space.Eq(x.Shape) && !hasGather(gs[gi]) && !hasDropout(gs[gi]) {
				g := gs[gi]
				g.Kind, g.Root, g.closed = Reduce, v, true
				add(g, v)
				continue
			}
			if on {
				if gi := siblingReduce(gs, owner, v, ready); gi >= 0 {
					add(gs[gi], v)
					continue
				}
			}
			newGroup(&Group{Kind: Reduce, Space: x.Shape, Root: v, closed: true}, v)
		case ops.MatMul:
			newGroup(&Group{Kind: Gemm, Space: v.Shape, Root: v, closed: true}, v)
		case ops.Loop:
			newGroup(&Group{Kind: Loop, Space: v.Shape, Root: v, closed: true}, v)
		case ops.Special:
			logits := v.Args[0]
			if on && v.Op == "cross_entropy" {
				if gi, ok := owner[logits]; ok && gs[gi].Kind == EW && !gs[gi].closed && gs[gi].Space.Eq(logits.Shape) {
					g := gs[gi]
					g.Kind, g.Root, g.Loss, g.closed = CE, v, v, true
					add(g, v)
					continue
				}
			}
			if on && v.Op == "ce_grad" {
				joined := false
				for gi, g := range gs {
					if g.Kind == CE && g.Loss != nil && g.Grad == nil && g.Loss.Attrs.F == v.Attrs.F && slices.Equal(g.Loss.Attrs.Ints, v.Attrs.Ints) &&
						g.Loss.Args[0] == v.Args[0] && g.Loss.Args[1] == v.Args[1] && ready(v, gi, v.Args[2]) &&
						(isConst(v.Args[2]) || v.Args[2] == g.Loss) {
						g.Grad = v
						add(g, v)
						joined = true
						break
					}
				}
				if joined {
					continue
				}
			}
			g := &Group{Kind: CE, Space: logits.Shape, Root: v, closed: true}
			if v.Op == "cross_entropy" {
				g.Loss = v
			} else {
				g.Grad = v
			}
			newGroup(g, v)
		}
	}
	return gs
}

// gatherGroup picks the open elementwise group over v's space that v may
// join, or -1: a group that computes none of the arguments v indexes (those
// are read at other indices, so another kernel must have written them),
// preferring the group of a same-index argument, else the latest one.
func gatherGroup(gs []*Group, owner map[*ir.Value]int, v *ir.Value, d *ops.Def, ready func(*ir.Value, int, ...*ir.Value) bool) int {
	ok := func(gi int) bool {
		g := gs[gi]
		if g.closed || g.Kind != EW || !g.Space.Eq(v.Shape) || !ready(v, gi) {
			return false
		}
		for i, a := range v.Args {
			if i < len(d.Indexed) && d.Indexed[i] {
				for _, s := range storageOf(a) {
					if og, has := owner[s]; has && og >= gi {
						return false
					}
				}
			}
		}
		return true
	}
	for i, a := range v.Args {
		if i < len(d.Indexed) && d.Indexed[i] {
			continue
		}
		if gi, has := owner[a]; has && ok(gi) {
			return gi
		}
	}
	for gi := len(gs) - 1; gi >= 0; gi-- {
		if ok(gi) {
			return gi
		}
	}
	return -1
}

// hasGather reports whether g computes a gather. A reduction does not
// absorb such a group: the reduce template walks each output's inputs in
// one thread, and a gather's index arithmetic there serialises what the
// elementwise template spreads over the whole grid.
func hasGather(g *Group) bool {
	for _, v := range g.Values {
		if kindOf(v) == ops.Gather {
			return true
		}
	}
	return false
}

// hasDropout reports whether g draws a dropout mask. A reduction does not
// absorb such a group either: the elementwise loop draws the mask 64
// elements at a time in the CPU emulation's vectorised loop, where the
// reduce template's loop stays scalar and pays a cache lookup per element
// (seed MLP: the two bias-gradient kernels took 0.6 of the step's 0.9 ms
// of dropout). The reduction then reads the group's output, which its
// other reader (the weight-gradient GEMM) needs stored anyway.
func hasDropout(g *Group) bool {
	for _, v := range g.Values {
		if v.Op == "dropout" {
			return true
		}
	}
	return false
}

// batchSum reports whether reduction v sums exactly the batch dims of
// gemm group g's product, and nothing else reads the product.
//
// A 16-bit product joins its sum only when the sum is one larger GEMM
// (kConcat): a Linear layer's weight gradient over [B, T, ·] activations,
// Σ_b dY_bᵀ·X_b, is dYᵀ·X over all B·T rows, which both backends run as
// one product rounded to 16 bits once (runtime.KConcatGemm), as
// PyTorch's autocast computes it, without storing B per-sample products.
// It is planned so with fusion off too (sumBatchAlways), so that fused
// and -fuse=none agree bit for bit. Any other 16-bit product (a
// convolution's weight gradient, Σ_b dY_b·Col_bᵀ) stays apart from its
// sum: on the GPU a summed batch of 16-bit products that is not one
// larger GEMM would go through runtime.LowerGemm's scratch, rounding
// each sample's product to 16 bits, so both plans round them so: the
// strided-batched product and the reduction kernel, on both backends.
func batchSum(g *Group, v *ir.Value, uses map[*ir.Value][]*ir.Value) bool {
	x := v.Args[0]
	if halfProduct(x) && !kConcat(x) {
		return false
	}
	if g.Kind != Gemm || g.Root != x || g.SumBatch != nil || v.Op != "sum" || len(uses[x]) != 1 || len(x.Shape) < 3 {
		return false
	}
	axes, err := ir.NormAxes(v.Attrs.Axes, len(x.Shape))
	if err != nil || len(axes) != len(x.Shape)-2 {
		return false
	}
	for i, ax := range axes {
		if ax != i {
			return false
		}
	}
	return true
}

// sumBatchAlways reports whether v, a sum of a product over its batch,
// joins the product's GEMM even with fusion off: a 16-bit product, whose
// rounding (once, or once per sample) is the policy's, not fusion's.
func sumBatchAlways(v *ir.Value) bool {
	return len(v.Args) > 0 && halfProduct(v.Args[0])
}

// halfProduct reports whether x is a product of 16-bit operands (its
// result 16-bit, or f32: f32_weight_grads.go), or another 16-bit value.
func halfProduct(x *ir.Value) bool {
	if x.Op == "matmul" && len(x.Args) == 2 {
		return x.Args[0].DType.IsHalf()
	}
	return x.DType.IsHalf()
}

// kConcat reports whether matmul x summed over its batch is one GEMM with
// the batch folded into K (runtime.KConcat's layout): op(A) = Aᵀ and
// op(B) = B, both stored with all of x's batch dims, so that each
// sample's matrices are consecutive rows of one (Batch·K)-row matrix.
func kConcat(x *ir.Value) bool {
	if x.Op != "matmul" || !x.Attrs.TransA || x.Attrs.TransB || len(x.Args) != 2 {
		return false
	}
	batch := x.Shape[:len(x.Shape)-2]
	for _, a := range x.Args {
		if len(a.Shape) != len(x.Shape) || !a.Shape[:len(a.Shape)-2].Eq(batch) {
			return false
		}
	}
	return true
}

// isRecast reports whether v is the recast pass's clone: a backward
// widening cast of a forward value.
func isRecast(v *ir.Value) bool {
	return v.Phase == "bwd" && widening(v) && v.Args[0].Phase == ""
}

// backwardOnly reports whether every value of g is the backward pass's.
func backwardOnly(g *Group) bool {
	for _, v := range g.Values {
		if v.Phase != "bwd" {
			return false
		}
	}
	return true
}
