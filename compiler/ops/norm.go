package ops

import "github.com/ngen-ml/ngen/compiler/ir"

// Ops behind normalisation layers that keep running statistics
// (the DSL's BatchNorm2d).
func init() {
	register(
		// where_train(a, b) is a in training mode and b in eval mode: the
		// runtime's train flag, which dropout also reads, selects batch
		// or running statistics.
		binary("where_train", 0, func(c *Ctx, x, y string) string {
			return "(" + c.Scalar("train", "int") + " ? " + x + " : " + y + ")"
		}, func(b *Builder, v, g *ir.Value) (*ir.Value, *ir.Value) {
			zero := b.Op("fill", ir.Attrs{F: 0, Shape: g.Shape.Clone(), Str: g.DType.String()})
			return b.Op("where_train", ir.Attrs{}, g, zero), b.Op("where_train", ir.Attrs{}, zero, g)
		}),
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
func BatchNorm2d(b *Builder, x, gamma, beta, rm, rv *ir.Value, momentum, eps float64) (y, newMean, newVar *ir.Value) {
	c := x.Shape[1].N
	op := func(name string, attrs ir.Attrs, args ...*ir.Value) *ir.Value { return b.Op(name, attrs, args...) }
	chan4 := ir.Attrs{Shape: ir.Static(1, c, 1, 1)}
	chan1 := ir.Attrs{Shape: ir.Static(c)}
	stat := ir.Attrs{Axes: []int{0, 2, 3}, KeepDim: true}
	mean := op("mean", stat, x)
	xc := op("sub", ir.Attrs{}, x, mean)
	variance := op("mean", stat, op("square", ir.Attrs{}, xc)) // biased, for normalising
	norm := func(centred, v *ir.Value) *ir.Value {
		return op("div", ir.Attrs{}, centred, op("sqrt", ir.Attrs{}, op("addc", ir.Attrs{F: eps}, v)))
	}
	train := norm(xc, variance)
	eval := norm(op("sub", ir.Attrs{}, x, op("reshape", chan4, rm)), op("reshape", chan4, rv))
	xhat := op("where_train", ir.Attrs{}, train, eval)
	y = op("add", ir.Attrs{}, op("mul", ir.Attrs{}, xhat, op("reshape", chan4, gamma)), op("reshape", chan4, beta))
	// running = (1-momentum)·running + momentum·batch, in training mode only;
	// the running variance is the unbiased one.
	move := func(run, batch *ir.Value) *ir.Value {
		moved := op("add", ir.Attrs{}, op("scale", ir.Attrs{F: 1 - momentum}, run), op("scale", ir.Attrs{F: momentum}, batch))
		return op("where_train", ir.Attrs{}, moved, run)
	}
	unbiased := op("unbias", ir.Attrs{Axes: []int{0, 2, 3}, Shape: x.Shape.Clone()}, variance)
	return y, move(rm, op("reshape", chan1, mean)), move(rv, op("reshape", chan1, unbiased))
}
