package codegen

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// elementwiseKernel renders a fused elementwise group: one grid-stride
// loop over the group's space that loads each input once (broadcast as its
// shape requires), computes every member in registers and stores only the
// members used outside the kernel.
//
// When it pays, the loop runs over rows (NGEN_GRID_STRIDE_ROWS): for a
// gather, rows of the length its template prefers; for broadcast inputs,
// rows over which each input is either whole or constant. Row-invariant
// index arithmetic then leaves the inner loop, which the CPU emulation
// vectorises; on the GPU it is the same coalesced grid stride.
func elementwiseKernel(p *compiler.Program, g *compiler.Group, target ops.Target) *kernel {
	k := newKernel(p, g, target)
	in, out := k.buffers(p, g)
	w := &k.body
	k.gridStride = true
	for _, v := range g.Values {
		if ops.Lookup(v.Op).LongThreads {
			k.block[0] = spreadBlock(g.Space)
			break
		}
	}
	k.grid = gridFor(g.Space, k.block[0])
	indent := "    "
	if rl := k.loopRowLen(g); rl > 0 {
		k.rowLen = rl
		fmt.Fprintf(w, "  const long long rows = %s;\n", k.sizeDiv(g.Space, rl))
		fmt.Fprintf(w, "  NGEN_GRID_STRIDE_ROWS(r, j, rows, %d) {\n", rl)
		fmt.Fprintf(w, "    const long long i = r * %dLL + j;\n", rl)
	} else {
		fmt.Fprintf(w, "  const long long n = %s;\n", k.size(g.Space))
		w.WriteString("  NGEN_GRID_STRIDE(i, n) {\n")
	}
	var body stmts
	e := k.elementwise(p, g, in, "i", indent, &body)
	gather := false
	for _, v := range g.Values {
		gather = gather || ops.Lookup(v.Op).Kind == ops.Gather
	}
	var after [][]*ir.Value
	if gather {
		// A gather kernel keeps its stores after the whole body, as it did
		// when placement read the rendered text back (a template may
		// assign its value over several lines and read through its
		// pointers in calls). Its statement is one stmt marked as a load,
		// so the early rule could apply, but that would change every
		// gather kernel: a change of its own.
		after = make([][]*ir.Value, len(body)+1)
		after[len(body)] = g.Outputs
	} else {
		after = earlyStores(body, g.Outputs)
	}
	store := func(vs []*ir.Value) {
		for _, v := range vs {
			fmt.Fprintf(w, "%s%s[i] = %s;\n", indent, out[v], k.stored(v, e))
		}
	}
	store(after[0])
	for i, s := range body {
		w.WriteString(s.text)
		store(after[i+1])
	}
	w.WriteString("  }\n")
	return k
}

// earlyStores places each output's store in the loop body as early as it
// is safe: after the statement defining it (after the whole body when none
// does) and after the body's last load of any input, so that no later
// load of this element can see it (an in-place optimizer update reads and
// writes the same storage). after[0] lists the stores before the first statement,
// after[i+1] those following statement i, each in the order of outs. A
// value kept in a register until the end lives across everything between;
// an optimizer update's two IEEE divisions are calls on the GPU, and
// keeping the new moments live across them made ptxas spill.
func earlyStores(body stmts, outs []*ir.Value) (after [][]*ir.Value) {
	lastLoad := -1
	for i, s := range body {
		if s.load {
			lastLoad = i
		}
	}
	after = make([][]*ir.Value, len(body)+1)
	for _, v := range outs {
		at := len(body) - 1
		for i, s := range body {
			if s.def == v {
				at = i
				break
			}
		}
		if lastLoad > at {
			at = lastLoad
		}
		after[at+1] = append(after[at+1], v)
	}
	return after
}

// loopRowLen picks the row length of the group's loop, or 0 for a flat
// loop: a gather member's preferred length, else the longest static
// suffix of the space over which every input that needs index arithmetic
// is whole or broadcast. The rows must divide the space's static trailing
// dimensions and leave a leading dimension to spread over the grid.
func (k *kernel) loopRowLen(g *compiler.Group) int {
	sp := g.Space
	if len(sp) < 2 {
		return 0
	}
	trailing := 1 // static trailing elements
	for i := len(sp) - 1; i >= 1 && sp[i].Sym == ""; i-- {
		trailing *= sp[i].N
	}
	for _, v := range g.Values {
		if ops.Lookup(v.Op).Kind == ops.Gather {
			if rl := ops.GatherRowLen(v); rl > 0 && trailing%rl == 0 {
				return rl
			}
			return 0
		}
	}
	var shapes []ir.Shape
	need := false
	for _, a := range g.Inputs {
		if a.Role == ir.Scalar || a.Op == "fill" {
			continue
		}
		shapes = append(shapes, a.Shape)
		if idx := k.bcastIndex(sp, a.Shape, "i"); idx != "i" && idx != "0" {
			need = true
		}
	}
	if !need {
		return 0
	}
	best, prod := 0, 1
	for s := 1; s < len(sp) && sp[len(sp)-s].Sym == ""; s++ {
		prod *= sp[len(sp)-s].N
		for _, in := range shapes {
			if _, ok := suffixMode(sp, in, s); !ok {
				return rowsWorth(best)
			}
		}
		best = prod
	}
	return rowsWorth(best)
}

// rowsWorth drops rows too short to vectorise.
func rowsWorth(rl int) int {
	if rl < 8 {
		return 0
	}
	return rl
}

// suffixMode reports whether in (broadcast to space) is whole over the
// last s dimensions of space (full true) or constant over them (full
// false); ok is false when it is neither.
func suffixMode(space, in ir.Shape, s int) (full, ok bool) {
	pad := padTo(in, len(space))
	full, bcast := true, true
	for i := len(space) - s; i < len(space); i++ {
		if pad[i] != space[i] {
			full = false
		}
		if pad[i] != ir.D(1) {
			bcast = false
		}
	}
	return full, full || bcast
}

// padTo prepends size-1 dimensions to in up to rank n.
func padTo(in ir.Shape, n int) ir.Shape {
	out := make(ir.Shape, 0, n)
	for i := len(in); i < n; i++ {
		out = append(out, ir.D(1))
	}
	return append(out, in...)
}

// rowIndex is the linear index of a value of shape in (broadcast to space)
// at column j of row r, for rows of rl elements, as a row-invariant part
// plus j when the value varies along the row; ok is false when rl is not
// the size of a static suffix of space over which in is whole or constant.
func (k *kernel) rowIndex(space, in ir.Shape, rl int) (string, bool) {
	prod := 1
	for s := 1; s < len(space) && space[len(space)-s].Sym == ""; s++ {
		prod *= space[len(space)-s].N
		if prod < rl {
			continue
		}
		if prod > rl {
			break
		}
		full, ok := suffixMode(space, in, s)
		if !ok {
			return "", false
		}
		pad := padTo(in, len(space))
		row := k.bcastIndex(space[:len(space)-s], pad[:len(space)-s], "r")
		if !full {
			return row, true
		}
		return fmt.Sprintf("(%s) * %dLL + j", row, rl), true
	}
	return "", false
}

// sizeDiv renders size(s) / rl as C; rl divides the static part.
func (k *kernel) sizeDiv(s ir.Shape, rl int) string {
	z := s.Size()
	q := ir.Shape{ir.D(int(z.N) / rl)}
	for _, sym := range z.Syms {
		q = append(q, ir.Dim{Sym: sym})
	}
	return k.size(q)
}

// spreadBlock is the block size of a kernel whose every thread does long
// work (ops.Def.LongThreads: an embedding gradient walks every token for
// each of its [V, D] outputs): halved from 256 down to 32 while the blocks over space would
// not give an H100's SMs one each (reduceFill/2), so that a small
// vocabulary's gradient ([99, 128], 50 blocks of 256) spreads the same
// threads over the SMs (198 blocks of 64) instead of leaving most idle.
func spreadBlock(space ir.Shape) int {
	z := space.Size()
	b := 256
	if len(z.Syms) > 0 {
		return b
	}
	for b > 32 && (z.N+int64(b)-1)/int64(b) < reduceFill/2 {
		b /= 2
	}
	return b
}
