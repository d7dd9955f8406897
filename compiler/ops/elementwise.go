package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/runtime"
)

// Elementwise ops. Binary ops broadcast like NumPy; their gradients reduce
// back to each argument's shape with SumTo.

func sameAsArg(v *ir.Value) (ir.Shape, ir.DType, error) {
	x := v.Args[0]
	if !x.DType.IsFloat() {
		return nil, 0, fmt.Errorf("needs a float tensor, got %s", x.Type())
	}
	return x.Shape, x.DType, nil
}

func broadcastArgs(v *ir.Value) (ir.Shape, ir.DType, error) {
	s := v.Args[0].Shape
	dt := v.Args[0].DType
	for _, a := range v.Args[1:] {
		if a.DType != dt {
			return nil, 0, fmt.Errorf("dtype mismatch: %s vs %s", v.Args[0].Type(), a.Type())
		}
		var err error
		if s, err = ir.Broadcast(s, a.Shape); err != nil {
			return nil, 0, err
		}
	}
	if !dt.IsFloat() {
		return nil, 0, fmt.Errorf("needs float tensors, got %s", dt)
	}
	return s, dt, nil
}

func unary(name string, flops int, expr func(c *Ctx, v *ir.Value, x string) string, grad func(b *Builder, v, g *ir.Value) *ir.Value) *Def {
	d := &Def{Name: name, Kind: Elementwise, NArgs: 1, Infer: sameAsArg, Flops: flops,
		Expr: func(c *Ctx, v *ir.Value, a []string) string { return expr(c, v, a[0]) }}
	if grad != nil {
		d.Grad = func(b *Builder, v, g *ir.Value) []*ir.Value { return []*ir.Value{grad(b, v, g)} }
	}
	return d
}

func binary(name string, flops int, expr func(c *Ctx, x, y string) string, grad func(b *Builder, v, g *ir.Value) (gx, gy *ir.Value)) *Def {
	return &Def{Name: name, Kind: Elementwise, NArgs: 2, Infer: broadcastArgs, Flops: flops,
		Expr: func(c *Ctx, v *ir.Value, a []string) string { return expr(c, a[0], a[1]) },
		Grad: func(b *Builder, v, g *ir.Value) []*ir.Value {
			gx, gy := grad(b, v, g)
			x, y := v.Args[0], v.Args[1]
			if gx != nil {
				gx = b.SumTo(gx, x.Shape)
			}
			if gy != nil {
				gy = b.SumTo(gy, y.Shape)
			}
			return []*ir.Value{gx, gy}
		}}
}

// gradOf builds an internal backward op from g and the forward values.
func gradOf(op string) func(b *Builder, v, g *ir.Value) *ir.Value {
	return func(b *Builder, v, g *ir.Value) *ir.Value {
		return b.Op(op, v.Attrs, g, v)
	}
}

// gradOfInput is gradOf for rules that need the forward input, not output.
func gradOfInput(op string) func(b *Builder, v, g *ir.Value) *ir.Value {
	return func(b *Builder, v, g *ir.Value) *ir.Value {
		return b.Op(op, v.Attrs, g, v.Args[0])
	}
}

// selecting marks d's result as one of the arguments at idx (Def.Selects).
func selecting(d *Def, idx ...int) *Def {
	d.Selects = idx
	return d
}

func backward(name string, flops int, expr func(c *Ctx, v *ir.Value, g, y string) string) *Def {
	return &Def{Name: name, Kind: Elementwise, NArgs: 2, Infer: broadcastArgs, Flops: flops,
		Expr: func(c *Ctx, v *ir.Value, a []string) string { return expr(c, v, a[0], a[1]) }}
}

func init() {
	register(
		selecting(unary("neg", 1, func(c *Ctx, v *ir.Value, x string) string { return "(-" + x + ")" },
			func(b *Builder, v, g *ir.Value) *ir.Value { return b.Unary("neg", g) }), 0),
		unary("exp", 1, func(c *Ctx, v *ir.Value, x string) string { return c.Math("exp") + "(" + x + ")" },
			func(b *Builder, v, g *ir.Value) *ir.Value { return b.Binary("mul", g, v) }),
		unary("log", 1, func(c *Ctx, v *ir.Value, x string) string { return c.Math("log") + "(" + x + ")" },
			func(b *Builder, v, g *ir.Value) *ir.Value { return b.Binary("div", g, v.Args[0]) }),
		unary("sqrt", 1, func(c *Ctx, v *ir.Value, x string) string { return c.Math("sqrt") + "(" + x + ")" },
			func(b *Builder, v, g *ir.Value) *ir.Value { return b.Binary("div", b.Scale(g, 0.5), v) }),
		unary("square", 1, func(c *Ctx, v *ir.Value, x string) string { return "ngen_sq(" + x + ")" },
			func(b *Builder, v, g *ir.Value) *ir.Value { return b.Binary("mul", b.Scale(g, 2), v.Args[0]) }),
		selecting(unary("abs", 1, func(c *Ctx, v *ir.Value, x string) string { return c.Math("fabs") + "(" + x + ")" },
			gradOfInput("abs_bwd")), 0),
		// A select, not fmaxf: NaN propagates as in torch.relu, and the
		// host compiler vectorises it (fmaxf's NaN rule keeps it scalar).
		// ngen_relu is the preamble's (the emulation's: bit masks).
		selecting(unary("relu", 1, func(c *Ctx, v *ir.Value, x string) string {
			return "ngen_relu(" + x + ")"
		},
			gradOf("relu_bwd")), 0),
		unary("sigmoid", 4, func(c *Ctx, v *ir.Value, x string) string {
			return "(" + c.Lit(1) + " / (" + c.Lit(1) + " + " + c.Math("exp") + "(-" + x + ")))"
		}, gradOf("sigmoid_bwd")),
		unary("tanh", 4, func(c *Ctx, v *ir.Value, x string) string { return c.Math("tanh") + "(" + x + ")" },
			gradOf("tanh_bwd")),
		// gelu is PyTorch's default (erf) form.
		unary("gelu", 8, func(c *Ctx, v *ir.Value, x string) string { return "ngen_gelu(" + x + ")" },
			gradOfInput("gelu_bwd")),
		// scale multiplies by the constant F.
		unary("scale", 1, func(c *Ctx, v *ir.Value, x string) string { return "(" + x + " * " + c.Lit(v.Attrs.F) + ")" },
			func(b *Builder, v, g *ir.Value) *ir.Value { return b.Scale(g, v.Attrs.F) }),
		// addc adds the constant F.
		unary("addc", 1, func(c *Ctx, v *ir.Value, x string) string { return "(" + x + " + " + c.Lit(v.Attrs.F) + ")" },
			func(b *Builder, v, g *ir.Value) *ir.Value { return g }),
		// clampc clamps to [-F, F] (torch.clamp: NaN stays NaN). It
		// clips the update's gradient (compiler/optimizer.go), which is
		// never differentiated: no gradient rule.
		unary("clampc", 2, func(c *Ctx, v *ir.Value, x string) string {
			f := c.Lit(v.Attrs.F)
			return "(" + x + " < -" + f + " ? -" + f + " : (" + x + " > " + f + " ? " + f + " : " + x + "))"
		}, nil),
		// clip_norm_scale multiplies by ClipGradNorm's coefficient, which
		// the builtin grad-norm kernel left in the status block
		// (runtime.GradNormKernel, runtime.StatusClipCoef), or by 1 when
		// the run-time max norm is +Inf (the session then skips that
		// kernel). Like clampc it only transforms the update's gradient:
		// no gradient rule.
		unary("clip_norm_scale", 1, func(c *Ctx, v *ir.Value, x string) string {
			return "(" + x + " * " + ClipCoef(c.T, c.StatusBlock(), c.Scalar("max_norm", c.T)) + ")"
		}, nil),
		// powc raises to the constant power F.
		unary("powc", 4, func(c *Ctx, v *ir.Value, x string) string {
			return c.Math("pow") + "(" + x + ", " + c.Lit(v.Attrs.F) + ")"
		}, func(b *Builder, v, g *ir.Value) *ir.Value {
			p := v.Attrs.F
			d := b.Scale(b.Op("powc", ir.Attrs{F: p - 1}, v.Args[0]), p)
			return b.Binary("mul", g, d)
		}),
		// dropout zeroes an element with probability F and scales the rest
		// by 1/(1-F), in training mode only. The mask comes from Philox
		// keyed by (seed, optimizer step, stream I) at the element's global
		// index (sampleIndex), so the backward op, every backend, k
		// micro-batches and N data-parallel ranks draw the masks of one
		// batch holding all their rows.
		inEval(unary("dropout", 3, func(c *Ctx, v *ir.Value, x string) string {
			return dropoutExpr(c, v, x)
		}, func(b *Builder, v, g *ir.Value) *ir.Value { return b.Op("dropout", v.Attrs, g) }), 0),
		// fill is the constant F of shape Attrs.Shape and dtype Attrs.Str.
		// Kernels inline it, so it never needs storage of its own.
		&Def{Name: "fill", Kind: Elementwise, NArgs: 0, Flops: 0,
			Infer: func(v *ir.Value) (ir.Shape, ir.DType, error) {
				dt, err := ir.ParseDType(v.Attrs.Str)
				return v.Attrs.Shape.Clone(), dt, err
			},
			Expr: func(c *Ctx, v *ir.Value, a []string) string { return c.Lit(v.Attrs.F) }},
		// copy materialises its argument in storage of its own.
		unary("copy", 0, func(c *Ctx, v *ir.Value, x string) string { return x },
			func(b *Builder, v, g *ir.Value) *ir.Value { return g }),
		// broadcast expands its argument to Attrs.Shape.
		&Def{Name: "broadcast", Kind: Elementwise, NArgs: 1, Flops: 0,
			Infer: func(v *ir.Value) (ir.Shape, ir.DType, error) {
				s, err := ir.Broadcast(v.Args[0].Shape, v.Attrs.Shape)
				if err != nil {
					return nil, 0, err
				}
				if !s.Eq(v.Attrs.Shape) {
					return nil, 0, fmt.Errorf("cannot broadcast %s to %s", v.Args[0].Shape, v.Attrs.Shape)
				}
				return s, v.Args[0].DType, nil
			},
			Expr: func(c *Ctx, v *ir.Value, a []string) string { return a[0] },
			Grad: func(b *Builder, v, g *ir.Value) []*ir.Value { return []*ir.Value{b.SumTo(g, v.Args[0].Shape)} }},

		binary("add", 1, func(c *Ctx, x, y string) string { return "(" + x + " + " + y + ")" },
			func(b *Builder, v, g *ir.Value) (*ir.Value, *ir.Value) { return g, g }),
		binary("sub", 1, func(c *Ctx, x, y string) string { return "(" + x + " - " + y + ")" },
			func(b *Builder, v, g *ir.Value) (*ir.Value, *ir.Value) { return g, b.Unary("neg", g) }),
		binary("mul", 1, func(c *Ctx, x, y string) string { return "(" + x + " * " + y + ")" },
			func(b *Builder, v, g *ir.Value) (*ir.Value, *ir.Value) {
				return b.Binary("mul", g, v.Args[1]), b.Binary("mul", g, v.Args[0])
			}),
		binary("div", 1, func(c *Ctx, x, y string) string { return "(" + x + " / " + y + ")" },
			func(b *Builder, v, g *ir.Value) (*ir.Value, *ir.Value) {
				gx := b.Binary("div", g, v.Args[1])
				return gx, b.Unary("neg", b.Binary("mul", gx, v))
			}),

		selecting(backward("relu_bwd", 1, func(c *Ctx, v *ir.Value, g, y string) string {
			return "ngen_relu_grad(" + y + ", " + g + ")"
		}), 0),
		backward("sigmoid_bwd", 3, func(c *Ctx, v *ir.Value, g, y string) string {
			return "(" + g + " * " + y + " * (" + c.Lit(1) + " - " + y + "))"
		}),
		backward("tanh_bwd", 3, func(c *Ctx, v *ir.Value, g, y string) string {
			return "(" + g + " * (" + c.Lit(1) + " - " + y + " * " + y + "))"
		}),
		backward("abs_bwd", 1, func(c *Ctx, v *ir.Value, g, x string) string {
			return "(" + g + " * (" + x + " > " + c.Lit(0) + " ? " + c.Lit(1) + " : (" + x + " < " + c.Lit(0) + " ? " + c.Lit(-1) + " : " + c.Lit(0) + ")))"
		}),
		backward("gelu_bwd", 10, func(c *Ctx, v *ir.Value, g, x string) string {
			return "(" + g + " * ngen_gelu_grad(" + x + "))"
		}),
	)
}

func dropoutExpr(c *Ctx, v *ir.Value, x string) string {
	// A product, not a select, so the CPU emulation's loop vectorises (a
	// dropped inf or NaN gives NaN, as in PyTorch).
	return fmt.Sprintf("(%s * %s)", x, dropoutFactor(c, v.Attrs.I, sampleIndex(c, v.Shape), v.Attrs.F))
}

// dropoutFactor renders the factor of the element at global index idx of
// a dropout with probability p drawn from stream: scale or 0 in training
// mode, 1 otherwise. It is one call, not a select on the train scalar
// around a call, so that the emulation header can make it branch-free:
// g++ does not vectorise a loop with a conditional call in it.
//
// ngen_dropout_if's scale is a float: in a double kernel 1/(1-p) would
// be rounded to float (1/0.75 off by 2.5e-8 relative), so there the call
// gives the 0/1 keep factor and the scale multiplies in double, chosen by
// the train flag, which is the same for every element (a loop-invariant
// select, not a branch in the loop).
func dropoutFactor(c *Ctx, stream int, idx string, p float64) string {
	scale := c.Lit(1 / (1 - p))
	if c.T == "double" {
		scale = "1.0f"
	}
	f := fmt.Sprintf("ngen_dropout_if(%s, %s, %s, (unsigned)%s, %s, %s, %s)", c.Scalar("train", "int"),
		c.Scalar("seed", "unsigned long long"), c.Scalar("step", "unsigned long long"), c.Imm(int64(stream)), idx, c.Lit(1-p), scale)
	if c.T == "double" {
		f = fmt.Sprintf("((double)%s * (%s ? %s : 1.0))", f, c.Scalar("train", "int"), c.Lit(1/(1-p)))
	}
	return f
}

// sampleIndex renders the index that keys an element's random draw: its
// index in the global batch, of which this batch holds the rows from the
// runtime scalar row0 on (a later micro-batch of an accumulated update,
// another rank's shard). With the batch axis B at position p of shape
// O×B×I, element (o, b, j) is numbered ((row0+b)·O + o)·I + j, which
// depends neither on this batch's size nor on the global one, so that
// every split of a batch into parts numbers its elements alike. A value
// without a batch axis is the same on every part and keeps its own index.
func sampleIndex(c *Ctx, s ir.Shape) string {
	p := -1
	for i, d := range s {
		if d.Sym == "B" {
			p = i
			break
		}
	}
	if p < 0 {
		return c.Index
	}
	row0 := c.Scalar("row0", "long long")
	if p == 0 {
		// The common case: rows are outermost, so the global index is the
		// local one shifted by row0 rows.
		return fmt.Sprintf("(%s + %s * %s)", c.Index, row0, c.Size(s[1:]))
	}
	inner, b := "("+c.Size(s[p+1:])+")", "("+c.Dim(s[p])+")"
	return fmt.Sprintf("((((%s + %s / %s %% %s) * %s + %s / (%s * %s)) * %s) + %s %% %s)",
		row0, c.Index, inner, b, "("+c.Size(s[:p])+")", c.Index, inner, b, inner, c.Index, inner)
}

// ClipCoef is the C expression of ClipGradNorm's coefficient of C type t
// in status block st: float bits in word runtime.StatusClipCoef, a
// double's in that word (low half) and the next. The grad-norm kernel
// writes it (codegen/guard.go); the update and the update check read it.
// maxNorm is the C name of the run-time max norm (the kernel scalar
// max_norm): at +Inf clipping is off, the session does not launch the
// grad-norm kernel (runtime.WhileClipping), and the coefficient is 1,
// which scales every gradient to itself, so the step is bit for bit an
// unclipped one.
func ClipCoef(t, st, maxNorm string) string {
	w := runtime.StatusClipCoef
	coef, one := fmt.Sprintf("__int_as_float(%s[%d])", st, w), "1.0f"
	if t == "double" {
		coef = fmt.Sprintf("__longlong_as_double((long long)(((unsigned long long)(unsigned)%s[%d] << 32) | (unsigned long long)(unsigned)%s[%d]))", st, w+1, st, w)
		one = "1.0"
	}
	return fmt.Sprintf("(%s - %s == (%s)0 ? %s : %s)", maxNorm, maxNorm, t, coef, one)
}
