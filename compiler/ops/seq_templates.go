package ops

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// The C templates of the sequence ops in seq.go. They index tensors of
// any rank whose dimensions may be symbolic, so coordinates are decoded
// with the dimensions Ctx.Dim renders (static ones become constants the
// compiler divides by cheaply).

// coords decodes the linear index c.Index over shape s into one long long
// coordinate per axis, named p+"c"+axis, and returns the names. In a
// kernel looping over rows of s's last dimension (Ctx.Row), that
// coordinate is the column and the rest come from the row alone, which
// the host compiler hoists out of the inner loop: a slice or concat
// along an outer axis then copies contiguous rows in a vectorised loop
// instead of dividing every element's index.
func (g *cg) coords(c *Ctx, p string, s ir.Shape) []string {
	names := make([]string, len(s))
	if len(s) == 0 {
		return names
	}
	last := len(s) - 1
	if last > 0 && c.Row != "" && s[last].Sym == "" && s[last].N == c.RowLen {
		names[last] = p + "c" + itoa(last)
		g.f("const long long %s = %s;", names[last], c.Col)
		g.f("unsigned long long %srem = (unsigned long long)(%s);", p, c.Row)
		last--
	} else {
		g.f("unsigned long long %srem = (unsigned long long)(%s);", p, c.Index)
	}
	for i := last; i >= 0; i-- {
		names[i] = fmt.Sprintf("%sc%d", p, i)
		if i == 0 {
			g.f("const long long %s = (long long)%srem;", names[i], p)
			continue
		}
		d := c.Dim(s[i])
		g.f("const long long %s = (long long)(%srem %% (unsigned long long)(%s)); %srem /= (unsigned long long)(%s);", names[i], p, d, p, d)
	}
	return names
}

// linear renders the linear index of coordinates cs (C expressions) in a
// tensor of shape s, by Horner's rule.
func linear(c *Ctx, cs []string, s ir.Shape) string {
	if len(s) == 0 {
		return "0"
	}
	e := "(" + cs[0] + ")"
	for i := 1; i < len(s); i++ {
		e = fmt.Sprintf("(%s * %s + %s)", e, c.Dim(s[i]), cs[i])
	}
	return e
}

func embeddingGather(c *Ctx, v *ir.Value, a []string, out string) string {
	vocab, dim := v.Args[0].Shape[0].N, v.Args[0].Shape[1].N
	g := &cg{}
	p := out + "_"
	row, col := g.rowCol(c, p, dim)
	g.f("const int %sid = %s[%s];", p, a[1], row)
	g.f("const bool %sbad = (unsigned)%sid >= %du;", p, p, vocab)
	if c.Status != nil {
		st, code := c.Status(v)
		// The first failure records the id, its position and the vocabulary.
		g.f("if (%sbad && atomicCAS(%s, 0, %s) == 0) { %s[1] = %sid; %s[2] = (int)%s; %s[3] = %d; }", p, st, code, st, p, st, row, st, vocab)
	}
	g.f("const %s %s = %s[(long long)(%sbad ? 0 : %sid) * %d + %s];", c.T, out, a[0], p, p, dim, col)
	return g.b.String()
}

func embeddingBwdGather(c *Ctx, v *ir.Value, a []string, out string) string {
	dim := v.Shape[1].N
	g := &cg{}
	p := out + "_"
	row, col := g.rowCol(c, p, dim)
	// The host form needs the kernel's loop over whole rows of the result
	// (Ctx.Row), which the emulation walks one row at a time with the
	// column from 0: at column 0 it sums the row for every column at once,
	// in one pass over the ids that adds each matching row of g as a
	// vector, and each column then reads its sum. O(V·N + N·D) instead of
	// O(V·D·N), and the same bits: every sum adds the same terms in the
	// same order (ids ascending); the GPU form below adds +0 for every
	// other id besides, which changes no sum (a sum from +0 is never -0).
	// The columns after the first read what column 0 wrote, against the
	// loop's ivdep; that holds because g++ does not vectorise a loop that
	// holds loops, so the columns run in order.
	if c.Target != CUDA && c.Row != "" && c.RowLen == dim && dim <= embeddingBwdRowMax {
		g.f("static thread_local %s %srow[%d];", c.T, p, dim)
		g.f("if (%s == 0) {", c.Col)
		g.f("  %s *const __restrict__ %sacc = %srow;", c.T, p, p)
		g.f("  for (int k = 0; k < %d; ++k) %sacc[k] = %s;", dim, p, c.Lit(0))
		g.f("  const long long %sn = %s;", p, c.Size(v.Args[1].Shape))
		g.f("  for (long long t = 0; t < %sn; ++t) {", p)
		g.f("    if (%s[t] != (int)%s) continue;", a[1], row)
		g.f("    const %s *const __restrict__ %sg = %s + t * %d;", c.T, p, a[0], dim)
		g.f("    for (int k = 0; k < %d; ++k) %sacc[k] += %sg[k];", dim, p, p)
		g.f("  }")
		g.f("}")
		g.f("const %s %s = %srow[%s];", c.T, out, p, col)
		return g.b.String()
	}
	// Every id in order, so the sum has one order on every run and
	// backend; ids out of range match no row.
	g.f("%s %s = %s;", c.T, out, c.Lit(0))
	g.f("const long long %sn = %s;", p, c.Size(v.Args[1].Shape))
	g.f("for (long long t = 0; t < %sn; ++t) {", p)
	g.f("  %s += %s[t] == (int)%s ? %s[t * %d + %s] : %s;", out, a[1], row, a[0], dim, col, c.Lit(0))
	g.f("}")
	return g.b.String()
}

// embeddingBwdRowMax bounds the row the CPU form of embedding_bwd keeps
// per worker thread (a static thread_local array of this many elements).
const embeddingBwdRowMax = 1 << 14

func permuteGather(c *Ctx, v *ir.Value, a []string, out string) string {
	g := &cg{}
	p := out + "_"
	oc := g.coords(c, p, v.Shape)
	inv := inversePerm(v.Attrs.Perm)
	ic := make([]string, len(inv))
	for j, i := range inv {
		ic[j] = oc[i]
	}
	g.f("const %s %s = %s[%s];", c.moveType(), out, a[0], linear(c, ic, v.Args[0].Shape))
	return g.b.String()
}

func sliceGather(c *Ctx, v *ir.Value, a []string, out string) string {
	x := v.Args[0]
	axis, start, _, _ := sliceOf(v, x.Shape)
	g := &cg{}
	p := out + "_"
	cs := g.coords(c, p, v.Shape)
	cs[axis] = fmt.Sprintf("%s + %d", cs[axis], start)
	g.f("const %s %s = %s[%s];", c.moveType(), out, a[0], linear(c, cs, x.Shape))
	return g.b.String()
}

func sliceBwdGather(c *Ctx, v *ir.Value, a []string, out string) string {
	gv := v.Args[0]
	axis, start, end, _ := sliceOf(v, v.Shape)
	g := &cg{}
	p := out + "_"
	cs := g.coords(c, p, v.Shape)
	ca := cs[axis]
	ok := fmt.Sprintf("%s >= %d && %s < %d", ca, start, ca, end)
	// The index is clamped into the slice so the load stays in bounds
	// whether or not the select keeps it.
	cs[axis] = fmt.Sprintf("(%s ? %s - %d : 0)", ok, ca, start)
	load := fmt.Sprintf("%s[%s]", a[0], linear(c, cs, gv.Shape))
	if c.Raw != "" { // copies the 16-bit elements (Def.Moves)
		g.f("const %s %s = (%s) ? %s : %s;", c.Raw, out, ok, load, c.RawZero())
		return g.b.String()
	}
	if gv.DType.IsHalf() {
		// A 16-bit element beside a float literal in ?: is ambiguous
		// C++ (it converts both ways): widen it first.
		load = "(float)" + load
	}
	g.f("const %s %s = (%s) ? %s : %s;", c.T, out, ok, load, zero(c))
	return g.b.String()
}

// zero is 0 in the context's type (an i32 slice has no float literal).
func zero(c *Ctx) string {
	if c.T == "int" {
		return "0"
	}
	return c.Lit(0)
}

func concatGather(c *Ctx, v *ir.Value, a []string, out string) string {
	axis, _ := concatAxis(v)
	g := &cg{}
	p := out + "_"
	cs := g.coords(c, p, v.Shape)
	ca := cs[axis]
	g.f("%s %s;", c.moveType(), out)
	off := 0
	var branches []string
	for i, x := range v.Args {
		n := x.Shape[axis].N
		xc := append([]string(nil), cs...)
		xc[axis] = fmt.Sprintf("%s - %d", ca, off)
		load := fmt.Sprintf("%s = %s[%s];", out, a[i], linear(c, xc, x.Shape))
		switch {
		case i == len(v.Args)-1:
			branches = append(branches, fmt.Sprintf("{ %s }", load))
		default:
			branches = append(branches, fmt.Sprintf("if (%s < %d) { %s }", ca, off+n, load))
		}
		off += n
	}
	g.f("%s", strings.Join(branches, " else "))
	return g.b.String()
}
