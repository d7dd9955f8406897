package ops

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Convolution and pooling over NCHW tensors, as index-mapping (Gather) ops:
//
//   - im2col unfolds the windows of x into columns, so a convolution is a
//     batched GEMM of the weight with them (the DSL's Conv2d); col2im, its
//     gradient, folds columns back, each input pixel gathering the columns
//     that read it (no atomics, deterministic);
//   - max pooling keeps, per output, the window offset of its maximum as
//     i32 (maxpool_argmax); maxpool_pick reads the maximum through it, and
//     the gradient maxpool_bwd routes each output's gradient back through
//     it, so no mask the size of the input is ever stored;
//   - avgpool and its gradient.
//
// Attrs.Ints is the window [KH, KW, SH, SW, PH, PW, DH, DW, G] (G, the
// convolution groups, only for im2col/col2im); Attrs.Shape is the input
// shape for the ops that produce it (col2im, the pooling gradients). C, H
// and W must be static; N may be the symbolic batch.

// Window is a convolution or pooling window.
type Window struct {
	KH, KW, SH, SW, PH, PW, DH, DW, G int
}

// Ints encodes w for Attrs.Ints.
func (w Window) Ints() []int { return []int{w.KH, w.KW, w.SH, w.SW, w.PH, w.PW, w.DH, w.DW, w.G} }

func windowOf(v *ir.Value) (Window, error) {
	a := v.Attrs.Ints
	if len(a) != 9 {
		return Window{}, fmt.Errorf("window attribute has %d values, want 9", len(a))
	}
	w := Window{a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]}
	if w.KH < 1 || w.KW < 1 || w.SH < 1 || w.SW < 1 || w.DH < 1 || w.DW < 1 || w.PH < 0 || w.PW < 0 || w.G < 1 {
		return Window{}, fmt.Errorf("bad window: kernel %dx%d, stride %dx%d, padding %dx%d, dilation %dx%d, groups %d",
			w.KH, w.KW, w.SH, w.SW, w.PH, w.PW, w.DH, w.DW, w.G)
	}
	return w, nil
}

// Out is the output size along one axis, as torch computes it (floor);
// below 1 when the window does not fit. Go's division truncates toward
// zero, which would turn a window a little larger than the padded input
// into one output.
func (w Window) Out(h, k, s, p, d int) int {
	span := h + 2*p - d*(k-1) - 1
	if span < 0 {
		return 0
	}
	return span/s + 1
}

// imageDims checks x is [N, C, H, W] with static C, H, W.
func imageDims(op string, s ir.Shape) (c, h, w int, err error) {
	if len(s) != 4 {
		return 0, 0, 0, fmt.Errorf("%s needs an N×C×H×W input, got %s", op, s)
	}
	for _, d := range s[1:] {
		if d.Sym != "" {
			return 0, 0, 0, fmt.Errorf("%s needs static C, H and W, got %s", op, s)
		}
	}
	return s[1].N, s[2].N, s[3].N, nil
}

// geometry returns the window and the input and output sizes of a
// windowed op whose input has shape in.
func geometry(op string, v *ir.Value, in ir.Shape) (w Window, c, h, wd, oh, ow int, err error) {
	if w, err = windowOf(v); err != nil {
		return
	}
	if c, h, wd, err = imageDims(op, in); err != nil {
		return
	}
	oh, ow = w.Out(h, w.KH, w.SH, w.PH, w.DH), w.Out(wd, w.KW, w.SW, w.PW, w.DW)
	if oh < 1 || ow < 1 {
		err = fmt.Errorf("%s: window %dx%d (dilation %dx%d) does not fit the %dx%d input padded by %dx%d",
			op, w.KH, w.KW, w.DH, w.DW, h, wd, w.PH, w.PW)
	}
	if c%w.G != 0 {
		err = fmt.Errorf("%s: %d channels do not split into %d groups", op, c, w.G)
	}
	return
}

// colShape is im2col's output: [N, K, L], or [N, G, K, L] with groups,
// where K = C/G·KH·KW and L = OH·OW.
func colShape(n ir.Dim, w Window, c, oh, ow int) ir.Shape {
	k := ir.D(c / w.G * w.KH * w.KW)
	if w.G == 1 {
		return ir.Shape{n, k, ir.D(oh * ow)}
	}
	return ir.Shape{n, ir.D(w.G), k, ir.D(oh * ow)}
}

func im2colInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	x := v.Args[0]
	w, c, _, _, oh, ow, err := geometry(v.Op, v, x.Shape)
	if err != nil {
		return nil, 0, err
	}
	return colShape(x.Shape[0], w, c, oh, ow), x.DType, nil
}

func col2imInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	w, c, _, _, oh, ow, err := geometry("col2im", v, v.Attrs.Shape)
	if err != nil {
		return nil, 0, err
	}
	if want := colShape(v.Attrs.Shape[0], w, c, oh, ow); !v.Args[0].Shape.Eq(want) {
		return nil, 0, fmt.Errorf("columns %s do not match image %s (want %s)", v.Args[0].Shape, v.Attrs.Shape, want)
	}
	return v.Attrs.Shape.Clone(), v.Args[0].DType, nil
}

func poolInfer(op string, dt func(x *ir.Value) ir.DType) func(v *ir.Value) (ir.Shape, ir.DType, error) {
	return func(v *ir.Value) (ir.Shape, ir.DType, error) {
		x := v.Args[0]
		if !x.DType.IsFloat() {
			return nil, 0, fmt.Errorf("%s needs a float input, got %s", op, x.Type())
		}
		w, c, h, wd, oh, ow, err := geometry(op, v, x.Shape)
		if err != nil {
			return nil, 0, err
		}
		if w.G != 1 {
			return nil, 0, fmt.Errorf("%s has no groups", op)
		}
		// torch's avg_pool2d has no dilation (nor does the template).
		if op == "avgpool" && (w.DH != 1 || w.DW != 1) {
			return nil, 0, fmt.Errorf("avgpool has no dilation, got %dx%d", w.DH, w.DW)
		}
		if 2*w.PH > w.KH || 2*w.PW > w.KW {
			return nil, 0, fmt.Errorf("%s: padding %dx%d must be at most half the kernel %dx%d", op, w.PH, w.PW, w.KH, w.KW)
		}
		// A dilated window can fall wholly in the padding; its maximum
		// would have no offset to store.
		if op != "avgpool" && (!windowsTouch(h, w.KH, w.SH, w.PH, w.DH, oh) || !windowsTouch(wd, w.KW, w.SW, w.PW, w.DW, ow)) {
			return nil, 0, fmt.Errorf("%s: a window %dx%d (dilation %dx%d) lies wholly in the padding of the %dx%d input", op, w.KH, w.KW, w.DH, w.DW, h, wd)
		}
		return ir.Shape{x.Shape[0], ir.D(c), ir.D(oh), ir.D(ow)}, dt(x), nil
	}
}

// windowsTouch reports whether each of the out windows along an axis of
// size h reads at least one input element.
func windowsTouch(h, k, s, p, d, out int) bool {
	for o := 0; o < out; o++ {
		touch := false
		for i := 0; i < k && !touch; i++ {
			y := o*s - p + i*d
			touch = y >= 0 && y < h
		}
		if !touch {
			return false
		}
	}
	return true
}

// poolGradInfer types a gradient that maps [N,C,OH,OW] values back to the
// input shape Attrs.Shape.
func poolGradInfer(op string) func(v *ir.Value) (ir.Shape, ir.DType, error) {
	return func(v *ir.Value) (ir.Shape, ir.DType, error) {
		_, c, _, _, oh, ow, err := geometry(op, v, v.Attrs.Shape)
		if err != nil {
			return nil, 0, err
		}
		want := ir.Shape{v.Attrs.Shape[0], ir.D(c), ir.D(oh), ir.D(ow)}
		for _, a := range v.Args {
			if !a.Shape.Eq(want) {
				return nil, 0, fmt.Errorf("%s: operand %s, want %s", op, a.Shape, want)
			}
		}
		return v.Attrs.Shape.Clone(), v.Args[0].DType, nil
	}
}

func sameDType(x *ir.Value) ir.DType { return x.DType }
func i32(*ir.Value) ir.DType         { return ir.I32 }

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
	cg.f("const %s %s = %s;", c.T, out,
		masked(ok, fmt.Sprintf("%s[((%sn * %d + %sc) * %d + %sy) * %d + %sx]", a[0], p, ch, p, h, p, wd, p), c.Lit(0)))
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
	cg.f("    %s += ok ? %s[((%sn * %d + %sg) * %d + kk) * %d + %s * %d + %s] : %s;",
		out, a[0], p, w.G, p, k, oh*ow, udiv("ty", w.SH), ow, udiv("tx", w.SW), c.Lit(0))
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
	cg.f("    const %s x = %s;", t, masked("ok", fmt.Sprintf("%s[%sbase + iy * %d + ix]", a[0], p, wd), "0"))
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
		if name, ok := c.Member(am); ok && equalInts(am.Attrs.Ints, v.Attrs.Ints) {
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

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
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
		if len(in) == 0 {
			// Every pixel has its window: load the gradient
			// unconditionally and select, which compiles without a branch.
			cg.f("const %s %sg = %s[%so];", c.T, p, a[0], p)
			cg.f("const %s %s = %s ? %sg : %s;", c.T, out, hit, p, c.Lit(0))
			return cg.b.String()
		}
		cg.f("const %s %s = %s;", c.T, out, masked(all(append(in, hit)...), fmt.Sprintf("%s[%so]", a[0], p), c.Lit(0)))
		return cg.b.String()
	}
	cg.f("%s %s = %s;", c.T, out, c.Lit(0))
	windowsOf(cg, p, w, h, wd, oh, ow)
	cg.f("    %s += (ok && %s[o] == kh * %d + kw) ? %s[o] : %s;", out, a[1], w.KW, a[0], c.Lit(0))
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
	cg.f("    %s += %s;", out, masked("ok", fmt.Sprintf("%s[%sbase + iy * %d + ix]", a[0], p, wd), c.Lit(0)))
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
	cg.f("    %s += ok ? %s[o] : %s;", out, a[0], c.Lit(0))
	cg.f("  }")
	cg.f("}")
	cg.f("%s /= %s;", out, c.Lit(float64(w.KH*w.KW)))
	return cg.b.String()
}

func init() {
	withShape := func(v *ir.Value) ir.Attrs {
		return ir.Attrs{Ints: append([]int(nil), v.Attrs.Ints...), Shape: v.Args[0].Shape.Clone()}
	}
	register(
		&Def{Name: "im2col", Kind: Gather, NArgs: 1, Infer: im2colInfer, Gather: im2colGather, Indexed: []bool{true}, RowLen: im2colRow,
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("col2im", withShape(v), g)}
			}},
		// The gradient ops have no gradient of their own: ngen
		// differentiates once.
		&Def{Name: "col2im", Kind: Gather, NArgs: 1, Infer: col2imInfer, Gather: col2imGather, Indexed: []bool{true}},
		&Def{Name: "maxpool_argmax", Kind: Gather, NArgs: 1, Infer: poolInfer("maxpool", i32), Gather: maxpoolArgmaxGather, Indexed: []bool{true}},
		// maxpool_pick(x, argmax) reads each window's maximum through its
		// stored offset.
		&Def{Name: "maxpool_pick", Kind: Gather, NArgs: 2, Infer: poolInfer("maxpool", sameDType), Gather: maxpoolPickGather, Indexed: []bool{true, false},
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("maxpool_bwd", withShape(v), g, v.Args[1]), nil}
			}},
		&Def{Name: "maxpool_bwd", Kind: Gather, NArgs: 2, Infer: poolGradInfer("maxpool_bwd"), Gather: maxpoolBwdGather, Indexed: []bool{true, true}},
		&Def{Name: "avgpool", Kind: Gather, NArgs: 1, Infer: poolInfer("avgpool", sameDType), Gather: avgpoolGather, Indexed: []bool{true},
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
				return []*ir.Value{b.Op("avgpool_bwd", withShape(v), g)}
			}},
		&Def{Name: "avgpool_bwd", Kind: Gather, NArgs: 1, Infer: poolGradInfer("avgpool_bwd"), Gather: avgpoolBwdGather, Indexed: []bool{true}},
	)
}

// Conv2d lowers torch.nn.functional.conv2d(x, w, bias) to im2col, a
// batched GEMM with the weight [Co, C/G, KH, KW] and the bias add (bias may
// be nil). The DSL's Conv2d and the op tests share it.
func Conv2d(b *Builder, x, w, bias *ir.Value, win Window) *ir.Value {
	// Operands are checked here rather than left to im2col, the reshape
	// and the GEMM, whose errors would name ops the user never wrote.
	attrs := ir.Attrs{Ints: win.Ints()}
	if _, _, err := im2colInfer(&ir.Value{Op: "conv2d", Args: []*ir.Value{x}, Attrs: attrs}); err != nil {
		return layerError(b, "conv2d", x, err)
	}
	if err := convOperands(x, w, bias, win); err != nil {
		return layerError(b, "conv2d", x, err)
	}
	col := b.Op("im2col", attrs, x)
	if b.Err != nil {
		return col
	}
	n, c := x.Shape[0], x.Shape[1].N
	co := w.Shape[0].N
	k := c / win.G * win.KH * win.KW
	oh, ow := win.Out(x.Shape[2].N, win.KH, win.SH, win.PH, win.DH), win.Out(x.Shape[3].N, win.KW, win.SW, win.PW, win.DW)
	var y *ir.Value
	if win.G == 1 {
		wm := b.Op("reshape", ir.Attrs{Shape: ir.Static(co, k)}, w)
		y = b.Op("matmul", ir.Attrs{}, wm, col) // [N, Co, OH·OW]
	} else {
		// The GEMM batches over (N, groups); the weight is broadcast over N.
		wm := b.Op("reshape", ir.Attrs{Shape: ir.Static(win.G, co/win.G, k)}, w)
		wb := b.Op("broadcast", ir.Attrs{Shape: ir.Shape{n, ir.D(win.G), ir.D(co / win.G), ir.D(k)}}, wm)
		y = b.Op("matmul", ir.Attrs{}, wb, col) // [N, G, Co/G, OH·OW]
	}
	y = b.Op("reshape", ir.Attrs{Shape: ir.Shape{n, ir.D(co), ir.D(oh), ir.D(ow)}}, y)
	if bias != nil {
		y = b.Op("add", ir.Attrs{}, y, b.Op("reshape", ir.Attrs{Shape: ir.Static(co, 1, 1)}, bias))
	}
	return y
}

// convOperands checks the weight is [Co, C/G, KH, KW] for x's C channels
// and the window, and the bias [Co], all of x's dtype.
func convOperands(x, w, bias *ir.Value, win Window) error {
	c := x.Shape[1].N // static: im2col accepted x
	if w.DType != x.DType || (bias != nil && bias.DType != x.DType) {
		return fmt.Errorf("input %s, weight %s and bias must share a dtype", x.Type(), w.Type())
	}
	if len(w.Shape) != 4 || w.Shape[0].Sym != "" || w.Shape[0].N%win.G != 0 {
		return fmt.Errorf("weight %s must be [Cout, Cin/groups, KH, KW] with Cout divisible by groups %d", w.Shape, win.G)
	}
	co := w.Shape[0].N
	if want := ir.Static(co, c/win.G, win.KH, win.KW); !w.Shape.Eq(want) {
		return fmt.Errorf("weight %s does not fit input %s with groups %d and kernel %dx%d: want %s",
			w.Shape, x.Shape, win.G, win.KH, win.KW, want)
	}
	if bias != nil && !bias.Shape.Eq(ir.Static(co)) {
		return fmt.Errorf("bias %s, want [%d]", bias.Shape, co)
	}
	return nil
}

// MaxPool2d lowers torch.nn.functional.max_pool2d: the window offsets of
// the maxima, then the maxima read through them.
func MaxPool2d(b *Builder, x *ir.Value, win Window) *ir.Value {
	attrs := ir.Attrs{Ints: win.Ints()}
	if _, _, err := poolInfer("maxpool2d", i32)(&ir.Value{Op: "maxpool2d", Args: []*ir.Value{x}, Attrs: attrs}); err != nil {
		return layerError(b, "maxpool2d", x, err)
	}
	return b.Op("maxpool_pick", attrs, x, b.Op("maxpool_argmax", attrs, x))
}

// layerError keeps the first error of b, naming the layer the user wrote,
// and returns x in place of the layer's result.
func layerError(b *Builder, op string, x *ir.Value, err error) *ir.Value {
	if b.Err == nil {
		b.Err = fmt.Errorf("%s (%s): %v", op, b.Pos, err)
	}
	return x
}
