package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// LayerNorm over the last axis, torch.nn.functional.layer_norm with weight
// and bias, as two fused kernels (Kind Loop):
//
//   - layernorm(x [..., D], gamma [D], beta [D]) → y, Attrs.F = eps: a
//     block per row. One pass over the row gathers the sums of d and d²
//     of the data shifted by the row's first element (d = x - x₀); the
//     variance E[d²] - E[d]² is then free of the cancellation that the
//     unshifted E[x²] - E[x]² suffers for rows whose mean is large
//     against their spread. A second pass (from cache) writes y.
//   - layernorm_bwd(g, x, gamma) → [N, G·(r·D + 2D)] for x [N, R..., D]:
//     the R rows of each leading index n split into G groups of r rows
//     (lnRowGroup: r the largest divisor of R up to 8), and a block per
//     group walks its rows, so a batch of 16 sequences of 128 rows runs
//     256 blocks, not 16. One pass per row
//     gathers the shifted sums and Σ g·γ and Σ g·γ·d, from which
//     dx = rstd·(g·γ - mean(g·γ) - x̂·mean(g·γ·x̂)); the same pass
//     accumulates the row's g·x̂ and g into the block's partial dgamma
//     and dbeta (each column always by the same thread, so in a fixed
//     order: no atomics, the same bits on every run). The result holds,
//     per group, dx for its rows, then the two partials; the gradient
//     rule sums the partials over n and the groups (a reduction over
//     [N, G, D], which reduce.go spreads over the GPU).
//
// The statistics are recomputed in backward rather than stored: one more
// read of a row the kernel reads anyway.

func layerNormDims(x, gamma *ir.Value) (d, rows int, err error) {
	if len(x.Shape) < 2 {
		return 0, 0, fmt.Errorf("input %s must have at least 2 dimensions", x.Shape)
	}
	last := x.Shape[len(x.Shape)-1]
	if last.Sym != "" {
		return 0, 0, fmt.Errorf("the normalised axis of %s must be static", x.Shape)
	}
	rows = 1
	for _, dim := range x.Shape[1 : len(x.Shape)-1] {
		if dim.Sym != "" {
			return 0, 0, fmt.Errorf("only the leading dimension of %s may be symbolic", x.Shape)
		}
		rows *= dim.N
	}
	if !x.DType.IsFloat() || gamma.DType != x.DType {
		return 0, 0, fmt.Errorf("operands must share a float dtype, got %s and %s", x.Type(), gamma.Type())
	}
	if !gamma.Shape.Eq(ir.Static(last.N)) {
		return 0, 0, fmt.Errorf("weight %s, want [%d]", gamma.Shape, last.N)
	}
	return last.N, rows, nil
}

// lnArgs splits layernorm's operands: the normalised input x (for the
// fused residual form, h: x = residual + dropout(h + bias)), the optional
// bias and residual, gamma and beta.
func lnArgs(v *ir.Value) (x, bias, res, gamma, beta *ir.Value) {
	a := v.Args
	if len(a) == 5 {
		return a[0], a[1], a[2], a[3], a[4]
	}
	return a[0], nil, nil, a[1], a[2]
}

// checkResidual checks the fused form's bias [D] and residual (x's shape).
func checkResidual(x, bias, res *ir.Value) error {
	if bias == nil {
		return nil
	}
	d := x.Shape[len(x.Shape)-1]
	if !bias.Shape.Eq(ir.Shape{d}) || bias.DType != x.DType || !res.Shape.Eq(x.Shape) || res.DType != x.DType {
		return fmt.Errorf("bias %s and residual %s, want [%s] and %s", bias.Type(), res.Type(), d, x.Type())
	}
	return nil
}

func layerNormInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	if len(v.Args) != 3 && len(v.Args) != 5 {
		return nil, 0, fmt.Errorf("layernorm takes 3 or 5 arguments, got %d", len(v.Args))
	}
	x, bias, res, gamma, beta := lnArgs(v)
	if _, _, err := layerNormDims(x, gamma); err != nil {
		return nil, 0, err
	}
	if err := checkResidual(x, bias, res); err != nil {
		return nil, 0, err
	}
	if !beta.Shape.Eq(gamma.Shape) || beta.DType != x.DType {
		return nil, 0, fmt.Errorf("bias %s, want %s", beta.Type(), gamma.Type())
	}
	if v.Attrs.Str != "" {
		// The output stored in a 16-bit type (compiler's fold norm
		// casts): computed in f32, rounded once by the store.
		dt, err := ir.ParseDType(v.Attrs.Str)
		if err != nil || !dt.IsHalf() || x.DType != ir.F32 {
			return nil, 0, fmt.Errorf("output type %q of an %s input: want bf16 or f16 of f32", v.Attrs.Str, x.DType)
		}
		return x.Shape.Clone(), dt, nil
	}
	return x.Shape.Clone(), x.DType, nil
}

// lnBwdArgs splits layernorm_bwd's operands: g, x (or h), the optional
// bias and residual, gamma.
func lnBwdArgs(v *ir.Value) (g, x, bias, res, gamma *ir.Value) {
	a := v.Args
	if len(a) == 5 {
		return a[0], a[1], a[2], a[3], a[4]
	}
	return a[0], a[1], nil, nil, a[2]
}

func layerNormBwdInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	if len(v.Args) != 3 && len(v.Args) != 5 {
		return nil, 0, fmt.Errorf("layernorm_bwd takes 3 or 5 arguments, got %d", len(v.Args))
	}
	g, x, bias, res, gamma := lnBwdArgs(v)
	d, rows, err := layerNormDims(x, gamma)
	if err != nil {
		return nil, 0, err
	}
	if err := checkResidual(x, bias, res); err != nil {
		return nil, 0, err
	}
	// A 16-bit gradient of an f32 layernorm's output is widened as it is
	// read (compiler's fold norm casts).
	if !g.Shape.Eq(x.Shape) || (g.DType != x.DType && !(g.DType.IsHalf() && x.DType == ir.F32)) {
		return nil, 0, fmt.Errorf("gradient %s, want %s", g.Type(), x.Type())
	}
	r := lnRowGroup(rows)
	return ir.Shape{x.Shape[0], ir.D(rows / r * (r*d + 2*d))}, x.DType, nil
}

// lnRowGroup is the rows of a group of layernorm_bwd (one block each):
// the largest divisor of rows up to 8. Fewer rows per block mean more
// blocks and more partial sums to add (2D per group, against r·D of dx).
func lnRowGroup(rows int) int {
	for r := min(rows, 8); r > 1; r-- {
		if rows%r == 0 {
			return r
		}
	}
	return 1
}

func layerNormGrad(b *Builder, v, g *ir.Value) []*ir.Value {
	x, bias, res, gamma, _ := lnArgs(v)
	d, rows, _ := layerNormDims(x, gamma)
	args := []*ir.Value{g, x, gamma}
	if bias != nil {
		args = []*ir.Value{g, x, bias, res, gamma}
	}
	bwd := b.Op("layernorm_bwd", ir.Attrs{F: v.Attrs.F, F2: v.Attrs.F2, I: v.Attrs.I}, args...)
	r := lnRowGroup(rows)
	groups := rows / r
	var dx, dgamma, dbeta *ir.Value
	if groups == 1 {
		part := func(from, to int) *ir.Value {
			return b.Op("slice", ir.Attrs{Axes: []int{1}, Ints: []int{from, to}}, bwd)
		}
		dx = b.Op("reshape", ir.Attrs{Shape: x.Shape.Clone()}, part(0, rows*d))
		dgamma = b.Op("sum", ir.Attrs{Axes: []int{0}}, part(rows*d, rows*d+d))
		dbeta = b.Op("sum", ir.Attrs{Axes: []int{0}}, part(rows*d+d, rows*d+2*d))
	} else {
		// [N, G, r·D + 2D]: each group's dx rows, then its partials.
		byGroup := b.Op("reshape", ir.Attrs{Shape: ir.Shape{x.Shape[0], ir.D(groups), ir.D(r*d + 2*d)}}, bwd)
		part := func(from, to int) *ir.Value {
			return b.Op("slice", ir.Attrs{Axes: []int{2}, Ints: []int{from, to}}, byGroup)
		}
		dx = b.Op("reshape", ir.Attrs{Shape: x.Shape.Clone()}, part(0, r*d))
		dgamma = b.Op("sum", ir.Attrs{Axes: []int{0, 1}}, part(r*d, r*d+d))
		dbeta = b.Op("sum", ir.Attrs{Axes: []int{0, 1}}, part(r*d+d, r*d+2*d))
	}
	if bias == nil {
		return []*ir.Value{dx, dgamma, dbeta}
	}
	// dx is the gradient of the sum, so of the residual; through the
	// dropout (the same mask) it is h's, and summed over rows the bias's.
	dh := dx
	if v.Attrs.F2 > 0 {
		dh = b.Op("dropout", ir.Attrs{F: v.Attrs.F2, I: v.Attrs.I}, dx)
	}
	return []*ir.Value{dh, b.SumTo(dh, bias.Shape), dx, dgamma, dbeta}
}

// layerNormExpand is the primitive form: mean, centred variance, scale,
// of the data shifted by each row's first element as in the kernel (the
// mean of unshifted f32 data far from 0 loses digits the kernel keeps).
func layerNormExpand(b *Builder, v *ir.Value) *ir.Value {
	x, bias, res, gamma, beta := lnArgs(v)
	if bias != nil {
		x = b.Binary("add", x, bias)
		if v.Attrs.F2 > 0 {
			x = b.Op("dropout", ir.Attrs{F: v.Attrs.F2, I: v.Attrs.I}, x)
		}
		x = b.Binary("add", res, x)
	}
	last := ir.Attrs{Axes: []int{-1}, KeepDim: true}
	xs := b.Binary("sub", x, b.Op("slice", ir.Attrs{Axes: []int{-1}, Ints: []int{0, 1}}, x))
	d := b.Binary("sub", xs, b.Op("mean", last, xs))
	variance := b.Op("mean", last, b.Unary("square", d))
	rstd := b.Op("powc", ir.Attrs{F: -0.5}, b.Op("addc", ir.Attrs{F: v.Attrs.F}, variance))
	return b.Binary("add", b.Binary("mul", b.Binary("mul", d, rstd), gamma), beta)
}

// rowsOf is the shape of x without its last axis: the rows of a
// per-row kernel.
func rowsOf(x *ir.Value) ir.Shape { return x.Shape[:len(x.Shape)-1].Clone() }

// shiftedStats renders the first pass over row r (offset base) of x: the
// shifted sums s1, s2 (and, with g, sgg = Σ g·γ and sgd = Σ g·γ·d), their
// block combination, and mu, rstd.
func (g *cg) shiftedStats(c *Ctx, x func(string) string, base string, d int, eps float64, grad func(string) string, gamma func(string) string) {
	t := c.T
	g.f("  const %s k0 = %s;", t, x(base))
	g.f("  %s s1 = %s, s2 = %s;", t, c.Lit(0), c.Lit(0))
	if grad != nil {
		g.f("  %s sgg = %s, sgd = %s;", t, c.Lit(0), c.Lit(0))
	}
	g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) {", d)
	g.f("    const %s dj = %s - k0;", t, x(base+" + j"))
	g.f("    s1 += dj; s2 += dj * dj;")
	if grad != nil {
		g.f("    const %s gg = %s * %s;", t, grad(base+" + j"), gamma("j"))
		g.f("    sgg += gg; sgd += gg * dj;")
	}
	g.f("  }")
	vars := []string{"s1", "s2"}
	if grad != nil {
		vars = append(vars, "sgg", "sgd")
	}
	g.blockCombine("red", "sum", vars...)
	g.statsEnd(c, "  ", d, eps)
}

// statsEnd renders, indented by ind, mu and rstd from the shifted sums s1
// and s2 of a row of d elements, and the mean's shift md.
func (g *cg) statsEnd(c *Ctx, ind string, d int, eps float64) {
	t := c.T
	g.f(ind+"const %s md = s1 / %s;", t, c.Lit(float64(d)))
	// Rounding may leave the variance of a constant row a hair below 0.
	g.f(ind+"const %s var_ = %s(s2 / %s - md * md, %s);", t, c.Math("fmax"), c.Lit(float64(d)), c.Lit(0))
	g.f(ind+"const %s rstd = %s / %s(var_ + %s);", t, c.Lit(1), c.Math("sqrt"), c.Lit(eps))
	g.f(ind+"const %s mu = k0 + md;", t)
}

// lnInput renders the normalised input at linear index base + j (j the
// column): x itself, or for the fused residual form residual +
// dropout(h + bias), rounded as the unfused ops round it, with the
// dropout mask drawn where a dropout op over the sum draws (the element's
// index in the global batch, sampleIndex).
func lnInput(c *Ctx, v *ir.Value, at func(int, string) string, d, xi, bi, ri int) func(string) string {
	in := lnInputCol(c, v, at, xi, bi, ri)
	return func(i string) string { return in(i, "("+i+") % "+itoa(d)) }
}

// lnInputCol is lnInput with the column j of index i given (i % d),
// which the CPU forms know without a division.
func lnInputCol(c *Ctx, v *ir.Value, at func(int, string) string, xi, bi, ri int) func(i, j string) string {
	if len(v.Args) != 5 {
		return func(i, _ string) string { return at(xi, i) }
	}
	shape := v.Args[xi].Shape
	return func(i, j string) string {
		z := "(" + at(xi, i) + " + " + at(bi, j) + ")"
		if p := v.Attrs.F2; p > 0 {
			ci := *c
			ci.Index = "(" + i + ")"
			z = "(" + z + " * " + dropoutFactor(c, v.Attrs.I, sampleIndex(&ci, shape), p) + ")"
		}
		return "(" + at(ri, i) + " + " + z + ")"
	}
}

// lnRowMax bounds the row the CPU forms below keep in a per-worker
// buffer.
const lnRowMax = 1 << 14

// lnCPURow renders the start of the CPU form of a LayerNorm kernel: with
// one-thread blocks (the CPU backend's launch of a Loop kernel) the
// row's input, which the fused residual form computes as residual +
// dropout(h + bias), is computed once into xr in a loop the host compiler
// vectorises (the dropout draws four or eight consecutive elements a
// call), and both passes read it. The GPU form's loops run over
// threadIdx.x with stride blockDim.x, which the compiler cannot prove is
// 1, so they ran scalar and drew every element's dropout twice. Same
// bits: the same values, summed in the same order as the GPU form's
// one-thread blocks. It is the host target's form (the CPU backend runs
// it with one-thread blocks); the caller returns after it. Only the
// fused residual form (five arguments) has one: a plain LayerNorm's input
// is a load, which the copy to xr made slower (its backward went from 0.7
// to 1.3-1.6 ms in the gpt step).
func (g *cg) lnCPURow(c *Ctx, v *ir.Value, d int) bool {
	if c.Target == CUDA || len(v.Args) != 5 || d > lnRowMax {
		return false
	}
	g.f("  static thread_local %s xr[%d];", c.T, d)
	return true
}

// lnCPUStats renders the one-thread form of shiftedStats over xr.
func (g *cg) lnCPUStats(c *Ctx, in func(i, j string) string, base string, d int, eps float64, grad, gamma func(string) string) {
	t := c.T
	g.f("    _Pragma(\"GCC ivdep\") for (int j = 0; j < %d; ++j) xr[j] = %s;", d, in(base+" + j", "j"))
	g.f("    const %s k0 = xr[0];", t)
	g.f("    %s s1 = %s, s2 = %s;", t, c.Lit(0), c.Lit(0))
	if grad != nil {
		g.f("    %s sgg = %s, sgd = %s;", t, c.Lit(0), c.Lit(0))
	}
	g.f("    for (int j = 0; j < %d; ++j) {", d)
	g.f("      const %s dj = xr[j] - k0;", t)
	g.f("      s1 += dj; s2 += dj * dj;")
	if grad != nil {
		g.f("      const %s gg = %s * %s;", t, grad(base+" + j"), gamma("j"))
		g.f("      sgg += gg; sgd += gg * dj;")
	}
	g.f("    }")
	g.statsEnd(c, "    ", d, eps)
}

func layerNormLoop(c *Ctx, v *ir.Value, at func(int, string) string, out string) string {
	x := v.Args[0]
	d := x.Shape[len(x.Shape)-1].N
	gi := 1
	if len(v.Args) == 5 {
		gi = 3
	}
	in := lnInput(c, v, at, d, 0, 1, 2)
	g := &cg{}
	if g.lnCPURow(c, v, d) {
		g.f("  const long long nrows = %s;", c.Size(rowsOf(x)))
		g.f("  for (long long r = blockIdx.x; r < nrows; r += gridDim.x) {")
		g.f("    const long long base = r * %d;", d)
		g.lnCPUStats(c, lnInputCol(c, v, at, 0, 1, 2), "base", d, v.Attrs.F, nil, nil)
		g.f("    _Pragma(\"GCC ivdep\") for (int j = 0; j < %d; ++j) %s[base + j] = (xr[j] - mu) * rstd * %s + %s;", d, out, at(gi, "j"), at(gi+1, "j"))
		g.f("  }")
		return g.b.String()
	}
	g.blockRed(c.T, "red", 2)
	g.f("const long long nrows = %s;", c.Size(rowsOf(x)))
	g.f("for (long long r = blockIdx.x; r < nrows; r += gridDim.x) {")
	g.f("  const long long base = r * %d;", d)
	g.shiftedStats(c, in, "base", d, v.Attrs.F, nil, nil)
	g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) {", d)
	g.f("    %s[base + j] = (%s - mu) * rstd * %s + %s;", out, in("base + j"), at(gi, "j"), at(gi+1, "j"))
	g.f("  }")
	g.f("}")
	return g.b.String()
}

func layerNormBwdLoop(c *Ctx, v *ir.Value, at func(int, string) string, out string) string {
	at = widen(v, at) // a 16-bit gradient (compiler's fold norm casts)
	x := v.Args[1]
	gi := 2
	if len(v.Args) == 5 {
		gi = 4
	}
	d, all, _ := layerNormDims(x, v.Args[gi])
	in := lnInput(c, v, at, d, 1, 2, 3)
	// A block per group of rows: n runs over the N·G groups, whose rows
	// follow each other in x as their results do in out.
	rows := lnRowGroup(all)
	groups := all / rows
	w := rows*d + 2*d
	g := &cg{}
	t := c.T
	if g.lnCPURow(c, v, d) {
		g.f("  const long long nb = %s * %d;", c.Dim(x.Shape[0]), groups)
		g.f("  for (long long n = blockIdx.x; n < nb; n += gridDim.x) {")
		g.f("    %s *dx = %s + n * %d;", t, out, w)
		g.f("    %s *pg = dx + %d, *pb = dx + %d;", t, rows*d, rows*d+d)
		g.f("    for (int j = 0; j < %d; ++j) { pg[j] = %s; pb[j] = %s; }", d, c.Lit(0), c.Lit(0))
		g.f("    for (int rr = 0; rr < %d; ++rr) {", rows)
		g.f("    const long long base = (n * %d + rr) * %d;", rows, d)
		g.lnCPUStats(c, lnInputCol(c, v, at, 1, 2, 3), "base", d, v.Attrs.F,
			func(i string) string { return at(0, i) }, func(i string) string { return at(gi, i) })
		g.f("    const %s mgg = sgg / %s, mgx = rstd * (sgd - md * sgg) / %s;", t, c.Lit(float64(d)), c.Lit(float64(d)))
		g.f("    _Pragma(\"GCC ivdep\") for (int j = 0; j < %d; ++j) {", d)
		g.f("      const %s xh = (xr[j] - mu) * rstd, gj = %s;", t, at(0, "base + j"))
		g.f("      dx[rr * %d + j] = rstd * (gj * %s - mgg - xh * mgx);", d, at(gi, "j"))
		g.f("      pg[j] += gj * xh; pb[j] += gj;")
		g.f("    }")
		g.f("    }")
		g.f("  }")
		return g.b.String()
	}
	g.blockRed(t, "red", 4)
	g.f("const long long nb = %s * %d;", c.Dim(x.Shape[0]), groups)
	g.f("for (long long n = blockIdx.x; n < nb; n += gridDim.x) {")
	g.f("  %s *dx = %s + n * %d;", t, out, w)
	g.f("  %s *pg = dx + %d, *pb = dx + %d;", t, rows*d, rows*d+d)
	g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) { pg[j] = %s; pb[j] = %s; }", d, c.Lit(0), c.Lit(0))
	g.f("  for (int rr = 0; rr < %d; ++rr) {", rows)
	g.f("  const long long base = (n * %d + rr) * %d;", rows, d)
	g.shiftedStats(c, in, "base", d, v.Attrs.F,
		func(i string) string { return at(0, i) }, func(i string) string { return at(gi, i) })
	// Σ g·γ·x̂ = rstd·(Σ g·γ·d - md·Σ g·γ), d shifted by k0.
	g.f("  const %s mgg = sgg / %s, mgx = rstd * (sgd - md * sgg) / %s;", t, c.Lit(float64(d)), c.Lit(float64(d)))
	g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) {", d)
	g.f("    const %s xh = (%s - mu) * rstd, gj = %s;", t, in("base + j"), at(0, "base + j"))
	g.f("    dx[rr * %d + j] = rstd * (gj * %s - mgg - xh * mgx);", d, at(gi, "j"))
	g.f("    pg[j] += gj * xh; pb[j] += gj;")
	g.f("  }")
	g.f("  }")
	g.f("}")
	return g.b.String()
}

func init() {
	register(
		&Def{Name: "layernorm", Kind: Loop, NArgs: -1, Infer: layerNormInfer, Loop: layerNormLoop, Flops: 8,
			Grad: layerNormGrad, Expand: layerNormExpand, Blocks: func(v *ir.Value) ir.Shape { return rowsOf(v.Args[0]) }},
		&Def{Name: "layernorm_bwd", Kind: Loop, NArgs: -1, Infer: layerNormBwdInfer, Loop: layerNormBwdLoop, Flops: 12,
			Blocks: func(v *ir.Value) ir.Shape {
				_, x, _, _, gamma := lnBwdArgs(v)
				_, rows, _ := layerNormDims(x, gamma)
				return ir.Shape{x.Shape[0], ir.D(rows / lnRowGroup(rows))}
			}},
	)
}
