package ops

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// The C templates of the gather ops in conv.go: each renders the
// statements that compute one output element of im2col, col2im or a
// pooling op (and their gradients) from the arguments it indexes.
// cg accumulates the lines of a gather template.
type cg struct{ b strings.Builder }

func (g *cg) f(format string, args ...any) { fmt.Fprintf(&g.b, format+"\n", args...) }

// The templates compute one output element from its row (every coordinate
// but the innermost) and its column (the innermost coordinate). When the
// kernel iterates rows of the template's length (Ctx.Row), everything that
// depends on the row alone is invariant in the inner loop, and what depends
// on the column is affine in it: the host compiler hoists the one and
// vectorises the other, and on the GPU the loop is the usual coalesced grid
// stride. Bounds checks that hold for every element are left out.

// rowCol returns the C names of the row index (long long) and the column
// (int) of output element c.Index in rows of rl elements.
func (g *cg) rowCol(c *Ctx, p string, rl int) (row, col string) {
	if c.Row != "" && c.RowLen == rl {
		g.f("const int %sj = %s;", p, c.Col)
		return c.Row, p + "j"
	}
	g.f("const long long %sr = (long long)((unsigned long long)(%s) / %du);", p, c.Index, rl)
	g.f("const int %sj = (int)((unsigned long long)(%s) - (unsigned long long)%sr * %du);", p, c.Index, p, rl)
	return p + "r", p + "j"
}

// decode splits index idx into names[0] (the batch, unbounded) and the
// coordinates names[1:] within dims (innermost last).
//
// Only the batch needs 64 bits: the rest is decoded from the offset within
// one image in 32-bit unsigned arithmetic, which costs a fraction of signed
// 64-bit division by a constant.
func (g *cg) decode(idx string, names []string, dims []int) {
	per := 1
	for _, d := range dims {
		per *= d
	}
	g.f("const long long %s = (long long)((unsigned long long)(%s) / %du);", names[0], idx, per)
	g.f("unsigned %s_t = (unsigned)((unsigned long long)(%s) - (unsigned long long)%s * %du);", names[0], idx, names[0], per)
	for i := len(dims) - 1; i >= 0; i-- {
		if i == 0 {
			g.f("const int %s = (int)%s_t;", names[i+1], names[0])
			continue
		}
		g.f("const int %s = (int)(%s_t %% %du); %s_t /= %du;", names[i+1], names[0], dims[i], names[0], dims[i])
	}
}

// udiv and umod render v / s and v % s for non-negative v.
func udiv(v string, s int) string {
	if s == 1 {
		return v
	}
	return fmt.Sprintf("(int)((unsigned)%s / %du)", v, s)
}

func umod(v string, s int) string {
	if s == 1 {
		return "0"
	}
	return fmt.Sprintf("(int)((unsigned)%s %% %du)", v, s)
}

// all joins conditions with &&; no conditions is "true".
func all(conds ...string) string {
	var cs []string
	for _, c := range conds {
		if c != "" && c != "true" {
			cs = append(cs, c)
		}
	}
	if len(cs) == 0 {
		return "true"
	}
	return strings.Join(cs, " && ")
}

// inWindow is the check that input coordinate v = o*s - p + k*d, for
// outputs o < out and taps k < kn, lies in [0, n), without the halves that
// hold for every o and k.
func inWindow(v string, out, s, p, kn, d, n int) string {
	var cs []string
	if p > 0 {
		cs = append(cs, v+" >= 0")
	}
	if (out-1)*s-p+(kn-1)*d >= n {
		cs = append(cs, fmt.Sprintf("%s < %d", v, n))
	}
	return all(cs...)
}

// hitsWindow is the check that t = i + p - k*d, for inputs i < n and taps
// k < kn, is the start of one of the out windows of stride s: t >= 0,
// t % s == 0 and t / s < out, without the parts that always hold.
func hitsWindow(t string, n, s, p, kn, d, out int) string {
	var cs []string
	if p-(kn-1)*d < 0 {
		cs = append(cs, t+" >= 0")
	}
	if s > 1 {
		cs = append(cs, fmt.Sprintf("(unsigned)%s %% %du == 0", t, s))
	}
	if n-1+p >= out*s {
		if s == 1 {
			cs = append(cs, fmt.Sprintf("(unsigned)%s < %du", t, out))
		} else {
			cs = append(cs, fmt.Sprintf("(unsigned)%s / %du < %du", t, s, out))
		}
	}
	return all(cs...)
}

// masked renders "ok ? load : zero", or the load alone when ok is "true".
func masked(ok, load, zero string) string {
	if ok == "true" {
		return load
	}
	return fmt.Sprintf("(%s) ? %s : %s", ok, load, zero)
}

// elem renders ptr[idx], an element of argument i of v, in the type the
// templates compute in: a 16-bit element (mixed precision) widens to
// float explicitly, since in a conditional with a float zero both its
// conversion to float and float's to it would apply. Other types read
// as they are, so their kernels' text is unchanged.
func elem(v *ir.Value, i int, ptr, idx string) string {
	if v.Args[i].DType.IsHalf() {
		return fmt.Sprintf("(float)%s", ld16(ptr, idx))
	}
	return fmt.Sprintf("%s[%s]", ptr, idx)
}

// ld16 renders ptr[idx] of a 16-bit array read at a computed index
// (preamble_half.cuh's ngen_ld16: a plain load on the GPU, a gathered
// 32-bit word in the CPU emulation).
func ld16(ptr, idx string) string { return fmt.Sprintf("ngen_ld16(%s, %s)", ptr, idx) }

// im2colRow is the row length im2col iterates: one output row of one
// window tap, so the input it reads is a row of the image.
func im2colRow(v *ir.Value) int {
	_, _, _, _, _, ow, _ := geometry("im2col", v, v.Args[0].Shape)
	return ow
}

func im2colGather(c *Ctx, v *ir.Value, a []string, out string) string {
	w, ch, h, wd, oh, ow, _ := geometry("im2col", v, v.Args[0].Shape)
	cg := &cg{}
	p := out + "_"
	k := ch / w.G * w.KH * w.KW
	row, ox := cg.rowCol(c, p, ow)
	if w.G == 1 {
		cg.decode(row, []string{p + "n", p + "k", p + "oy"}, []int{k, oh})
		cg.f("const int %sg = 0;", p)
	} else {
		cg.decode(row, []string{p + "n", p + "g", p + "k", p + "oy"}, []int{w.G, k, oh})
	}
	cg.f("const int %sc = %sg * %d + (int)((unsigned)%sk / %du);", p, p, ch/w.G, p, w.KH*w.KW)
	cg.f("const int %sy = %soy * %d - %d + (int)((unsigned)%sk / %du %% %du) * %d;", p, p, w.SH, w.PH, p, w.KW, w.KH, w.DH)
	cg.f("const int %sx = %s * %d - %d + (int)((unsigned)%sk %% %du) * %d;", p, ox, w.SW, w.PW, p, w.KW, w.DW)
	ok := all(inWindow(p+"y", oh, w.SH, w.PH, w.KH, w.DH, h), inWindow(p+"x", ow, w.SW, w.PW, w.KW, w.DW, wd))
	at := fmt.Sprintf("((%sn * %d + %sc) * %d + %sy) * %d + %sx", p, ch, p, h, p, wd, p)
	if c.Raw != "" { // a 16-bit column copies its input's bits (Def.Moves)
		cg.f("const %s %s = %s;", c.Raw, out, masked(ok, ld16(a[0], at), c.RawZero()))
		return cg.b.String()
	}
	cg.f("const %s %s = %s;", c.T, out, masked(ok, elem(v, 0, a[0], at), c.Lit(0)))
	return cg.b.String()
}

func col2imGather(c *Ctx, v *ir.Value, a []string, out string) string {
	w, ch, h, wd, oh, ow, _ := geometry("col2im", v, v.Attrs.Shape)
	cg := &cg{}
	p := out + "_"
	k := ch / w.G * w.KH * w.KW
	row, x := cg.rowCol(c, p, wd)
	cg.decode(row, []string{p + "n", p + "c", p + "y"}, []int{ch, h})
	if w.G == 1 {
		cg.f("const int %sg = 0, %sci = %sc;", p, p, p)
	} else {
		cg.f("const int %sg = %s, %sci = %s;", p, udiv(p+"c", ch/w.G), p, umod(p+"c", ch/w.G))
	}
	cg.f("%s %s = %s;", c.T, out, c.Lit(0))
	cg.f("for (int kh = 0; kh < %d; ++kh) {", w.KH)
	cg.f("  const int ty = %sy + %d - kh * %d;", p, w.PH, w.DH)
	cg.f("  const bool oky = %s;", hitsWindow("ty", h, w.SH, w.PH, w.KH, w.DH, oh))
	cg.f("  for (int kw = 0; kw < %d; ++kw) {", w.KW)
	cg.f("    const int tx = %s + %d - kw * %d;", x, w.PW, w.DW)
	cg.f("    const bool ok = %s;", all("oky", hitsWindow("tx", wd, w.SW, w.PW, w.KW, w.DW, ow)))
	cg.f("    const int kk = (%sci * %d + kh) * %d + kw;", p, w.KH, w.KW)
	cg.f("    %s += ok ? %s : %s;", out,
		elem(v, 0, a[0], fmt.Sprintf("((%sn * %d + %sg) * %d + kk) * %d + %s * %d + %s", p, w.G, p, k, oh*ow, udiv("ty", w.SH), ow, udiv("tx", w.SW))), c.Lit(0))
	cg.f("  }")
	cg.f("}")
	return cg.b.String()
}

// poolRow decodes the row of a pooling op's output element into (n, c,
// oy), names its column ox and declares the linear base of its input
// channel.
func poolRow(c *Ctx, cg *cg, p string, ch, h, wd, oh, ow int) {
	row, ox := cg.rowCol(c, p, ow)
	cg.decode(row, []string{p + "n", p + "c", p + "oy"}, []int{ch, oh})
	cg.f("const int %sox = %s;", p, ox)
	cg.f("const long long %sbase = (%sn * %d + %sc) * %d;", p, p, ch, p, h*wd)
}

// windowIn opens the loops over the taps (kh, kw) of output (oy, ox)'s
// window, with its input pixel (iy, ix) and ok, whether that pixel lies
// inside the image (padding reads as nothing).
func windowIn(cg *cg, p string, w Window, h, wd, oh, ow int) {
	cg.f("for (int kh = 0; kh < %d; ++kh) {", w.KH)
	cg.f("  const int iy = %soy * %d - %d + kh * %d;", p, w.SH, w.PH, w.DH)
	cg.f("  const bool oky = %s;", inWindow("iy", oh, w.SH, w.PH, w.KH, w.DH, h))
	cg.f("  for (int kw = 0; kw < %d; ++kw) {", w.KW)
	cg.f("    const int ix = %sox * %d - %d + kw * %d;", p, w.SW, w.PW, w.DW)
	cg.f("    const bool ok = %s;", all("oky", inWindow("ix", ow, w.SW, w.PW, w.KW, w.DW, wd)))
}

func maxpoolArgmaxGather(c *Ctx, v *ir.Value, a []string, out string) string {
	w, ch, h, wd, oh, ow, _ := geometry("maxpool", v, v.Args[0].Shape)
	t := v.Args[0].DType.CType()
	cg := &cg{}
	p := out + "_"
	poolRow(c, cg, p, ch, h, wd, oh, ow)
	// torch's max_pool2d rule: a strictly greater value, or any NaN, takes
	// the index. The maximum itself is kept in out_m for maxpool_pick.
	cg.f("int %s = -1;", out)
	cg.f("%s %sm = 0;", t, p)
	windowIn(cg, p, w, h, wd, oh, ow)
	cg.f("    const %s x = %s;", t, masked("ok", elem(v, 0, a[0], fmt.Sprintf("%sbase + iy * %d + ix", p, wd)), "0"))
	cg.f("    if (ok && (%s < 0 || x > %sm || x != x)) { %s = kh * %d + kw; %sm = x; }", out, p, out, w.KW, p)
	cg.f("  }")
	cg.f("}")
	return cg.b.String()
}

func maxpoolPickGather(c *Ctx, v *ir.Value, a []string, out string) string {
	w, ch, h, wd, oh, ow, _ := geometry("maxpool", v, v.Args[0].Shape)
	cg := &cg{}
	p := out + "_"
	// Picked through an argmax this kernel computes from the same input:
	// the maximum is already in a register.
	if am := v.Args[1]; am.Op == "maxpool_argmax" && am.Args[0] == v.Args[0] && c.Member != nil {
		if name, ok := c.Member(am); ok && slices.Equal(am.Attrs.Ints, v.Attrs.Ints) {
			cg.f("const %s %s = %s_m;", c.T, out, name)
			return cg.b.String()
		}
	}
	poolRow(c, cg, p, ch, h, wd, oh, ow)
	cg.f("const unsigned %sk = (unsigned)%s;", p, a[1])
	cg.f("const %s %s = %s[%sbase + (%soy * %d - %d + (int)(%sk / %du) * %d) * %d + %sox * %d - %d + (int)(%sk %% %du) * %d];",
		c.T, out, a[0], p, p, w.SH, w.PH, p, w.KW, w.DH, wd, p, w.SW, w.PW, p, w.KW, w.DW)
	return cg.b.String()
}

// inputRow decodes the row of a pooling gradient's output element (an
// input pixel of the pooling) into (n, c, y), names its column x and
// declares the linear base of the pooling output's channel.
func inputRow(c *Ctx, cg *cg, p string, ch, h, wd, oh, ow int) {
	row, x := cg.rowCol(c, p, wd)
	cg.decode(row, []string{p + "n", p + "c", p + "y"}, []int{ch, h})
	cg.f("const int %sx = %s;", p, x)
	cg.f("const long long %sobase = (%sn * %d + %sc) * %d;", p, p, ch, p, oh*ow)
}

// windowsOf opens the loops over the taps (kh, kw) whose windows may
// contain input pixel (y, x) of the gradient ops, with ok, whether one
// does, and that window's linear index o.
func windowsOf(cg *cg, p string, w Window, h, wd, oh, ow int) {
	cg.f("for (int kh = 0; kh < %d; ++kh) {", w.KH)
	cg.f("  const int ty = %sy + %d - kh * %d;", p, w.PH, w.DH)
	cg.f("  const bool oky = %s;", hitsWindow("ty", h, w.SH, w.PH, w.KH, w.DH, oh))
	cg.f("  for (int kw = 0; kw < %d; ++kw) {", w.KW)
	cg.f("    const int tx = %sx + %d - kw * %d;", p, w.PW, w.DW)
	cg.f("    const bool ok = %s;", all("oky", hitsWindow("tx", wd, w.SW, w.PW, w.KW, w.DW, ow)))
	cg.f("    const long long o = %sobase + %s * %d + %s;", p, udiv("ty", w.SH), ow, udiv("tx", w.SW))
}

// tiled reports whether the windows tile the input: no padding or
// dilation and stride = kernel, so each input pixel is in at most one.
func (w Window) tiled() bool {
	return w.PH == 0 && w.PW == 0 && w.DH == 1 && w.DW == 1 && w.SH == w.KH && w.SW == w.KW
}

func maxpoolBwdGather(c *Ctx, v *ir.Value, a []string, out string) string {
	w, ch, h, wd, oh, ow, _ := geometry("maxpool_bwd", v, v.Attrs.Shape)
	cg := &cg{}
	p := out + "_"
	inputRow(c, cg, p, ch, h, wd, oh, ow)
	if w.tiled() {
		// The one window holding (y, x), if any (the floor may drop the
		// last rows and columns).
		cg.f("const int %soy = %s, %sox = %s;", p, udiv(p+"y", w.SH), p, udiv(p+"x", w.SW))
		cg.f("const long long %so = %sobase + %soy * %d + %sox;", p, p, p, ow, p)
		var in []string
		if h > oh*w.SH {
			in = append(in, fmt.Sprintf("%soy < %d", p, oh))
		}
		if wd > ow*w.SW {
			in = append(in, fmt.Sprintf("%sox < %d", p, ow))
		}
		hit := fmt.Sprintf("%s[%so] == %s * %d + %s", a[1], p, umod(p+"y", w.SH), w.KW, umod(p+"x", w.SW))
		// Each pixel takes its window's gradient or zero (MovesIf): a
		// 16-bit gradient's bits are copied (c.Raw), not widened,
		// rounded and narrowed again.
		zero, load := c.Lit(0), elem(v, 0, a[0], p+"o")
		if c.Raw != "" {
			zero, load = c.RawZero(), ld16(a[0], p+"o")
		}
		if len(in) == 0 {
			// Every pixel has its window: load the gradient
			// unconditionally and select, which compiles without a branch.
			ld := fmt.Sprintf("%s[%so]", a[0], p)
			if c.Raw != "" || v.Args[0].DType.IsHalf() {
				ld = ld16(a[0], p+"o")
			}
			cg.f("const %s %sg = %s;", c.moveType(), p, ld)
			cg.f("const %s %s = %s ? %sg : %s;", c.moveType(), out, hit, p, zero)
			return cg.b.String()
		}
		cg.f("const %s %s = %s;", c.moveType(), out, masked(all(append(in, hit)...), load, zero))
		return cg.b.String()
	}
	cg.f("%s %s = %s;", c.T, out, c.Lit(0))
	windowsOf(cg, p, w, h, wd, oh, ow)
	cg.f("    %s += (ok && %s[o] == kh * %d + kw) ? %s : %s;", out, a[1], w.KW, elem(v, 0, a[0], "o"), c.Lit(0))
	cg.f("  }")
	cg.f("}")
	return cg.b.String()
}

func avgpoolGather(c *Ctx, v *ir.Value, a []string, out string) string {
	w, ch, h, wd, oh, ow, _ := geometry("avgpool", v, v.Args[0].Shape)
	cg := &cg{}
	p := out + "_"
	poolRow(c, cg, p, ch, h, wd, oh, ow)
	// count_include_pad, torch's default: padding counts as zeros.
	cg.f("%s %s = %s;", c.T, out, c.Lit(0))
	windowIn(cg, p, w, h, wd, oh, ow) // no dilation: poolInfer rejects it for avgpool
	cg.f("    %s += %s;", out, masked("ok", elem(v, 0, a[0], fmt.Sprintf("%sbase + iy * %d + ix", p, wd)), c.Lit(0)))
	cg.f("  }")
	cg.f("}")
	cg.f("%s /= %s;", out, c.Lit(float64(w.KH*w.KW)))
	return cg.b.String()
}

func avgpoolBwdGather(c *Ctx, v *ir.Value, a []string, out string) string {
	w, ch, h, wd, oh, ow, _ := geometry("avgpool_bwd", v, v.Attrs.Shape)
	cg := &cg{}
	p := out + "_"
	inputRow(c, cg, p, ch, h, wd, oh, ow)
	cg.f("%s %s = %s;", c.T, out, c.Lit(0))
	windowsOf(cg, p, w, h, wd, oh, ow)
	cg.f("    %s += ok ? %s : %s;", out, elem(v, 0, a[0], "o"), c.Lit(0))
	cg.f("  }")
	cg.f("}")
	cg.f("%s /= %s;", out, c.Lit(float64(w.KH*w.KW)))
	return cg.b.String()
}
