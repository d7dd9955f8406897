package ops

import "github.com/ngen-ml/ngen/compiler/ir"

// Ops behind normalisation layers that keep running statistics
// (the DSL's BatchNorm2d).
func init() {
	register(
		// where_train(a, b) is a in training mode and b in eval mode: the
		// runtime's train flag, which dropout also reads, selects batch
		// or running statistics.
		inEval(binary("where_train", 0, func(c *Ctx, x, y string) string {
			return "(" + c.Scalar("train", "int") + " ? " + x + " : " + y + ")"
		}, func(b *Builder, v, g *ir.Value) (*ir.Value, *ir.Value) {
			zero := b.Op("fill", ir.Attrs{F: 0, Shape: g.Shape.Clone(), Str: g.DType.String()})
			return b.Op("where_train", ir.Attrs{}, g, zero), b.Op("where_train", ir.Attrs{}, zero, g)
		}), 1),
		// unbias(x) = x·n/(n-1), n the element count of Attrs.Axes of
		// Attrs.Shape (maybe symbolic): the unbiased variance that
		// running_var tracks, as in PyTorch. Not differentiated: it only
		// feeds state updates.
		&Def{Name: "unbias", Kind: Elementwise, NArgs: 1, Infer: sameAsArg, Flops: 2,
			Expr: func(c *Ctx, v *ir.Value, a []string) string {
				n := CountC(c, v.Attrs.Shape, v.Attrs.Axes)
				return "(" + a[0] + " * ((" + c.T + ")(" + n + ") / (" + c.T + ")((" + n + ") - 1)))"
			}},
	)
}

// BatchNorm2d lowers torch.nn.functional.batch_norm on N×C×H×W with
// weight and bias [C] and running statistics rm, rv [C]. It returns the
// output and the new running mean and variance (moved by momentum in
// training mode, unchanged in eval mode), for the caller to write back.
// The DSL's BatchNorm2d and the op tests share it.
//
// The lowering is shaped for two passes over x forward and two backward:
//   - statistics of the shifted data d = x - running_mean: the sums of d
//     and d² read only x and rm, so they are sibling reductions that fuse
//     into one pass; an f32 model sums them and takes var = E[d²] - E[d]²
//     in f64 (below), so the cancellation that the one-pass form suffers
//     when the mean is far from the shift costs nothing visible in f32,
//     at the first steps too, when the running mean is still 0;
//   - everything per channel (mean, variance, scale, shift, the running
//     updates) is one small [C] kernel, and the normalisation is
//     y = d·a + b with a = weight·rstd and b = bias - shift·a [C], one
//     elementwise pass that a following ReLU joins;
//   - autodiff of that form needs only sum(dy) and sum(dy·d), siblings
//     over dy's space (one pass), then one elementwise pass for dx.
//
// where_train picks the batch or running statistics per channel, so the
// [N,C,H,W] arithmetic is the same in both modes.
func BatchNorm2d(b *Builder, x, gamma, beta, rm, rv *ir.Value, momentum, eps float64) (y, newMean, newVar *ir.Value) {
	c := x.Shape[1].N
	op := func(name string, attrs ir.Attrs, args ...*ir.Value) *ir.Value { return b.Op(name, attrs, args...) }
	none := ir.Attrs{}
	chan4 := ir.Attrs{Shape: ir.Static(1, c, 1, 1)}
	stat := ir.Attrs{Axes: []int{0, 2, 3}} // per channel, [C]
	d := op("sub", none, x, op("reshape", chan4, rm))
	// An f32 model takes the statistics in f64: d widened (exactly),
	// its sums and squares accumulated and E[d²] - E[d]² subtracted in
	// double, then the mean and variance rounded once to f32. In f32 the
	// subtraction loses log2(E[d]²/var) bits, 8 for a channel whose mean
	// is 18 times its spread, and the shift does not help at the first
	// steps, when the running mean is still 0 (fuzz_1164: the GPU and
	// CPU forms' sums, each rounded to f32 in its own order, gave a
	// weight's gradient 0.2% apart). The variance's gradient reaches d in
	// double too, where its terms through E[d²] and E[d] cancel. Nothing
	// of [N,C,H,W] is stored in f64: the casts fuse into the passes that
	// read d, and the backward widens d again (the "recast" pass).
	dd := d
	if x.DType == ir.F32 {
		dd = op("cast", ir.Attrs{Str: ir.F64.String()}, d)
	}
	s1 := op("mean", stat, dd) // batch mean - running mean
	s2 := op("mean", stat, op("square", none, dd))
	// Biased variance for normalising; rounding may leave it a hair
	// below zero for a constant channel, which relu clamps.
	variance := op("relu", none, op("sub", none, s2, op("square", none, s1)))
	if x.DType == ir.F32 {
		s1 = op("cast", ir.Attrs{Str: ir.F32.String()}, s1)
		variance = op("cast", ir.Attrs{Str: ir.F32.String()}, variance)
	}
	rstd := func(v *ir.Value) *ir.Value { return op("powc", ir.Attrs{F: -0.5}, op("addc", ir.Attrs{F: eps}, v)) }
	zero := op("fill", ir.Attrs{F: 0, Shape: ir.Static(c), Str: x.DType.String()})
	shift := op("where_train", none, s1, zero) // x - mean = d - shift
	a := op("mul", none, gamma, op("where_train", none, rstd(variance), rstd(rv)))
	bias := op("sub", none, beta, op("mul", none, shift, a))
	y = op("add", none, op("mul", none, d, op("reshape", chan4, a)), op("reshape", chan4, bias))
	// running = (1-momentum)·running + momentum·batch, in training mode
	// only; the batch mean is rm + s1, and running_var tracks the unbiased
	// variance, as in PyTorch.
	newMean = op("where_train", none, op("add", none, rm, op("scale", ir.Attrs{F: momentum}, s1)), rm)
	unbiased := op("unbias", ir.Attrs{Axes: []int{0, 2, 3}, Shape: x.Shape.Clone()}, variance)
	moved := op("add", none, op("scale", ir.Attrs{F: 1 - momentum}, rv), op("scale", ir.Attrs{F: momentum}, unbiased))
	newVar = op("where_train", none, moved, rv)
	return y, newMean, newVar
}
