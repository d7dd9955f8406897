package fuzzgen

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/dsl"
)

// Elementwise ops, reductions and dropout.

func sameShape(n *Node, in []Shape) ([]Shape, error) {
	if err := wantArgs(in, 1, 1); err != nil {
		return nil, err
	}
	return []Shape{in[0].Clone()}, nil
}

// broadcast is NumPy's rule, with the batch dimension equal only to
// itself or 1.
func broadcast(a, b Shape) (Shape, error) {
	n := max(len(a), len(b))
	out := make(Shape, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db:
			out[i] = da
		case da == 1:
			out[i] = db
		case db == 1:
			out[i] = da
		default:
			return nil, fmt.Errorf("shapes %s and %s do not broadcast", a, b)
		}
	}
	return out, nil
}

// unaryRow is an elementwise op of one operand. dsl is the DSL function's
// name; fn calls it. pre prepares the operand (a domain) and mag
// estimates the result's magnitude from the operand's.
func unaryRow(name, fnName string, weight int, fn func(*dsl.Tensor, float64) *dsl.Tensor,
	drawF func(g *gen) float64, pre func(g *gen, r Ref, f float64) (Ref, bool), mag func(m, f float64) float64) *row {
	return &row{
		name:  name,
		infer: sameShape,
		build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor { return one(fn(a[0], n.F)) },
		src: func(n *Node, a []string) string {
			if drawF != nil {
				return fmt.Sprintf("dsl.%s(%s, %s)", fnName, a[0], goFloat(n.F))
			}
			return fmt.Sprintf("dsl.%s(%s)", fnName, a[0])
		},
		weight: weight,
		draw: func(g *gen) bool {
			g.kink = name == "relu" || name == "abs"
			x, ok := g.pick(nil)
			g.kink = false
			if !ok {
				return false
			}
			f := 0.0
			if drawF != nil {
				f = drawF(g)
			}
			if pre != nil {
				if x, ok = pre(g, x, f); !ok {
					return false
				}
			}
			r, ok := g.add(Node{Op: name, Args: []Ref{x}, F: f})
			if ok {
				g.setMag(r, mag(g.getMag(x), f))
			}
			return ok
		},
	}
}

func plain(f func(*dsl.Tensor) *dsl.Tensor) func(*dsl.Tensor, float64) *dsl.Tensor {
	return func(x *dsl.Tensor, _ float64) *dsl.Tensor { return f(x) }
}

func same(m, _ float64) float64 { return m }

// positiveDomain makes the operand at least 0.25 (log, sqrt, negative
// and fractional powers, divisors).
func positiveDomain(g *gen, r Ref, f float64) (Ref, bool) { return g.positive(r, 0.25), true }

func bounded(limit float64) func(g *gen, r Ref, f float64) (Ref, bool) {
	return func(g *gen, r Ref, _ float64) (Ref, bool) { return g.bounded(r, limit), true }
}

func pick[T any](g *gen, vs ...T) T { return vs[g.rng.IntN(len(vs))] }

func init() {
	register(
		unaryRow("relu", "ReLU", 6, plain(dsl.ReLU), nil, nil, same),
		unaryRow("sigmoid", "Sigmoid", 3, plain(dsl.Sigmoid), nil, nil, func(float64, float64) float64 { return 1 }),
		unaryRow("tanh", "Tanh", 3, plain(dsl.Tanh), nil, nil, func(float64, float64) float64 { return 1 }),
		unaryRow("gelu", "GELU", 3, plain(dsl.GELU), nil, nil, same),
		unaryRow("exp", "Exp", 2, plain(dsl.Exp), nil, bounded(4), func(m, _ float64) float64 { return math.Exp(m) }),
		unaryRow("log", "Log", 2, plain(dsl.Log), nil, positiveDomain, func(m, _ float64) float64 { return math.Max(math.Log(m), 1.4) }),
		unaryRow("sqrt", "Sqrt", 2, plain(dsl.Sqrt), nil, positiveDomain, func(m, _ float64) float64 { return math.Sqrt(m) }),
		unaryRow("square", "Square", 2, plain(dsl.Square), nil, bounded(30), func(m, _ float64) float64 { return m * m }),
		unaryRow("abs", "Abs", 2, plain(dsl.Abs), nil, nil, same),
		unaryRow("neg", "Neg", 2, plain(dsl.Neg), nil, nil, same),
		unaryRow("scale", "Scale", 2, dsl.Scale,
			func(g *gen) float64 { return pick(g, -1.7, 0.5, 2.0, 0.3, -0.25) }, nil,
			func(m, f float64) float64 { return m * math.Abs(f) }),
		unaryRow("addc", "AddScalar", 2, dsl.AddScalar,
			func(g *gen) float64 { return pick(g, 0.3, -1.25, 2.0, 0.1) }, nil,
			func(m, f float64) float64 { return m + math.Abs(f) }),
		unaryRow("powc", "Pow", 2, dsl.Pow,
			func(g *gen) float64 { return pick(g, 2.0, 3.0, 0.5, 1.5, -0.5, -1.5, 2.5) },
			func(g *gen, r Ref, f float64) (Ref, bool) {
				if f == math.Trunc(f) && f > 0 {
					return g.bounded(r, 10), true
				}
				return positiveDomain(g, g.bounded(r, 10), f)
			},
			func(m, f float64) float64 { return math.Pow(math.Max(m, 4), math.Abs(f)) }),
		binaryRow("add", "Add", dsl.Add, func(a, b float64) float64 { return a + b }),
		binaryRow("sub", "Sub", dsl.Sub, func(a, b float64) float64 { return a + b }),
		binaryRow("mul", "Mul", dsl.Mul, func(a, b float64) float64 { return a * b }),
		binaryRow("div", "Div", dsl.Div, func(a, b float64) float64 { return a * 4 }),
		reduceRow("sum", "Sum", dsl.Sum),
		reduceRow("mean", "Mean", dsl.Mean),
		reduceRow("max", "Max", dsl.Max),
		&row{
			name:  "dropout",
			infer: sameShape,
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.Dropout(a[0], n.F))
			},
			src:     func(n *Node, a []string) string { return fmt.Sprintf("dsl.Dropout(%s, %s)", a[0], goFloat(n.F)) },
			streams: func(n *Node) int { return 1 },
			weight:  2,
			draw: func(g *gen) bool {
				if g.noDrop {
					return false
				}
				x, ok := g.pick(nil)
				if !ok {
					return false
				}
				r, ok := g.add(Node{Op: "dropout", Args: []Ref{x}, F: pick(g, 0.1, 0.25, 0.5)})
				if ok {
					g.setMag(r, 2*g.getMag(x))
				}
				return ok
			},
		},
	)
}

func binaryRow(name, fnName string, fn func(x, y *dsl.Tensor) *dsl.Tensor, mag func(a, b float64) float64) *row {
	return &row{
		name: name,
		infer: func(n *Node, in []Shape) ([]Shape, error) {
			if err := wantArgs(in, 2, 2); err != nil {
				return nil, err
			}
			s, err := broadcast(in[0], in[1])
			return []Shape{s}, err
		},
		build:  func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor { return one(fn(a[0], a[1])) },
		src:    func(n *Node, a []string) string { return fmt.Sprintf("dsl.%s(%s, %s)", fnName, a[0], a[1]) },
		weight: map[string]int{"add": 6, "sub": 3, "mul": 4, "div": 2}[name],
		draw: func(g *gen) bool {
			x, ok := g.pick(nil)
			if !ok {
				return false
			}
			y := g.partner(x)
			if y == x && (name == "sub" || name == "div") && !g.odds(8) {
				// x-x and x/x are constants: rarely.
				return false
			}
			if name == "div" {
				y = g.positive(y, 0.5)
			}
			if name == "mul" {
				x, y = g.bounded(x, 100), g.bounded(y, 100)
			}
			r, ok := g.add(Node{Op: name, Args: []Ref{x, y}})
			if ok {
				g.setMag(r, mag(g.getMag(x), g.getMag(y)))
			}
			return ok
		},
	}
}

// partner draws the second operand of a binary op on x: x itself, a
// result of a shape that broadcasts with x's, or a new parameter or input
// of such a shape (x's with leading dimensions dropped and others set
// to 1).
func (g *gen) partner(x Ref) Ref {
	sx := g.s.shapeOf(x)
	if g.odds(8) {
		return x
	}
	if !g.odds(3) {
		if r, ok := g.pick(func(s Shape) bool { _, err := broadcast(sx, s); return err == nil }); ok {
			return r
		}
	}
	drop := 0
	if len(sx) > 0 && !g.odds(2) {
		drop = g.rng.IntN(len(sx))
	}
	s := sx[drop:].Clone()
	for i := range s {
		if g.odds(3) {
			s[i] = 1
		}
	}
	if s.HasBatch() && (s[0] != Batch || g.odds(2)) {
		// A parameter has no batch dimension, an input has it first only.
		for i := range s {
			if s[i] == Batch {
				s[i] = 1
			}
		}
	}
	if s.HasBatch() || g.odds(2) {
		return g.input(s)
	}
	return g.param(s)
}

// param declares a parameter of shape s, initialised U(-a, a).
func (g *gen) param(s Shape) Ref {
	r, _ := g.add(Node{Op: "param", Name: g.name("p"), Ints: s.Clone(), F: pick(g, 0.5, 1.0)})
	g.setMag(r, 1)
	return r
}

func reduceRow(name, fnName string, fn func(x *dsl.Tensor, keep bool, axes ...int) *dsl.Tensor) *row {
	return &row{
		name: name,
		infer: func(n *Node, in []Shape) ([]Shape, error) {
			if err := wantArgs(in, 1, 1); err != nil {
				return nil, err
			}
			x := in[0]
			red := map[int]bool{}
			for _, a := range n.Ints {
				ax, err := normAxis(a, len(x))
				if err != nil {
					return nil, err
				}
				if red[ax] {
					return nil, fmt.Errorf("axis %d repeated", a)
				}
				red[ax] = true
			}
			out := Shape{}
			for i, d := range x {
				switch {
				case n.Ints != nil && !red[i]:
					out = append(out, d)
				case n.Str == "keep":
					out = append(out, 1)
				}
			}
			return []Shape{out}, nil
		},
		build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
			return one(fn(a[0], n.Str == "keep", n.Ints...))
		},
		src: func(n *Node, a []string) string {
			s := fmt.Sprintf("dsl.%s(%s, %s", fnName, a[0], goBool(n.Str == "keep"))
			if len(n.Ints) > 0 {
				s += ", " + intsSrc(n.Ints)
			}
			return s + ")"
		},
		weight: 4,
		draw: func(g *gen) bool {
			g.kink = name == "max"
			x, ok := g.pick(func(s Shape) bool { return len(s) >= 1 })
			g.kink = false
			if !ok {
				return false
			}
			sx := g.s.shapeOf(x)
			var axes []int
			if !g.odds(5) {
				for _, a := range g.rng.Perm(len(sx))[:1+g.rng.IntN(len(sx))] {
					if g.odds(3) {
						a -= len(sx)
					}
					axes = append(axes, a)
				}
			}
			keep := ""
			if g.odds(2) {
				keep = "keep"
			}
			r, ok := g.add(Node{Op: name, Args: []Ref{x}, Ints: axes, Str: keep})
			if ok {
				m := g.getMag(x)
				if name == "sum" {
					m *= float64(sx.Elems(7))
				}
				g.setMag(r, m)
			}
			return ok
		},
	}
}
