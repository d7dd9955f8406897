package fuzzgen

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/dsl"
)

// Views and data movement: reshape, flatten, permute, transpose, slice,
// select, concat, stack; matrix products.

// size is the static element count of s and the number of batch
// dimensions in it.
func size(s Shape) (n, batch int) {
	n = 1
	for _, d := range s {
		if d == Batch {
			batch++
		} else {
			n *= d
		}
	}
	return n, batch
}

// factors splits n into k factors at random.
func (g *gen) factors(n, k int) []int {
	out := make([]int, k)
	for i := range out {
		out[i] = 1
	}
	for p := 2; n > 1; {
		if n%p != 0 {
			p++
			continue
		}
		out[g.rng.IntN(k)] *= p
		n /= p
	}
	return out
}

func init() {
	register(
		&row{
			name: "reshape",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				an, ab := size(in[0])
				bn, bb := size(n.Ints)
				if an != bn || ab != bb {
					return nil, fmt.Errorf("cannot reshape %s to %s", in[0], Shape(n.Ints))
				}
				for _, d := range n.Ints {
					if d < 1 && d != Batch {
						return nil, fmt.Errorf("dimension %d", d)
					}
				}
				return []Shape{Shape(n.Ints).Clone()}, nil
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.Reshape(a[0], dims(n.Ints)...))
			},
			src:    func(n *Node, a []string) string { return fmt.Sprintf("dsl.Reshape(%s, %s)", a[0], dimsSrc(n.Ints)) },
			weight: 4,
			draw: func(g *gen) bool {
				x, ok := g.pick(nil)
				if !ok {
					return false
				}
				sn, sb := size(g.s.shapeOf(x))
				to := Shape{}
				for _, f := range g.factors(sn, 1+g.rng.IntN(4)) {
					to = append(to, f)
				}
				if sb == 1 {
					at := 0
					if g.odds(4) {
						at = g.rng.IntN(len(to) + 1)
					}
					to = append(to[:at:at], append(Shape{Batch}, to[at:]...)...)
				}
				r, ok := g.add(Node{Op: "reshape", Args: []Ref{x}, Ints: to})
				if ok {
					g.setMag(r, g.getMag(x))
				}
				return ok
			},
		},
		&row{
			name: "flatten",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				x := in[0]
				if len(x) < 2 || !x[1:].Static() {
					return nil, fmt.Errorf("flatten needs rank ≥ 2 and static dimensions after the first, got %s", x)
				}
				p, _ := size(x[1:])
				return []Shape{{x[0], p}}, nil
			},
			build:  func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor { return one(dsl.Flatten(a[0])) },
			src:    func(n *Node, a []string) string { return fmt.Sprintf("dsl.Flatten(%s)", a[0]) },
			weight: 2,
			draw: func(g *gen) bool {
				x, ok := g.pick(func(s Shape) bool { return len(s) >= 3 && s[1:].Static() })
				if !ok {
					return false
				}
				r, ok := g.add(Node{Op: "flatten", Args: []Ref{x}})
				if ok {
					g.setMag(r, g.getMag(x))
				}
				return ok
			},
		},
		&row{
			name: "permute",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				x := in[0]
				if !isPerm(n.Ints, len(x)) {
					return nil, fmt.Errorf("perm %v is not a permutation of %d axes", n.Ints, len(x))
				}
				out := make(Shape, len(x))
				for i, a := range n.Ints {
					out[i] = x[a]
				}
				return []Shape{out}, nil
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.Permute(a[0], n.Ints...))
			},
			src:    func(n *Node, a []string) string { return fmt.Sprintf("dsl.Permute(%s, %s)", a[0], intsSrc(n.Ints)) },
			weight: 3,
			draw: func(g *gen) bool {
				x, ok := g.pick(func(s Shape) bool { return len(s) >= 2 })
				if !ok {
					return false
				}
				r, ok := g.add(Node{Op: "permute", Args: []Ref{x}, Ints: g.rng.Perm(len(g.s.shapeOf(x)))})
				if ok {
					g.setMag(r, g.getMag(x))
				}
				return ok
			},
		},
		&row{
			name: "transpose",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				x := in[0]
				if len(n.Ints) != 2 {
					return nil, fmt.Errorf("transpose takes two axes")
				}
				a, err := normAxis(n.Ints[0], len(x))
				if err != nil {
					return nil, err
				}
				b, err := normAxis(n.Ints[1], len(x))
				if err != nil {
					return nil, err
				}
				out := x.Clone()
				out[a], out[b] = out[b], out[a]
				return []Shape{out}, nil
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.Transpose(a[0], n.Ints[0], n.Ints[1]))
			},
			src:    func(n *Node, a []string) string { return fmt.Sprintf("dsl.Transpose(%s, %s)", a[0], intsSrc(n.Ints)) },
			weight: 2,
			draw: func(g *gen) bool {
				x, ok := g.pick(func(s Shape) bool { return len(s) >= 2 })
				if !ok {
					return false
				}
				k := len(g.s.shapeOf(x))
				a, b := g.rng.IntN(k), g.rng.IntN(k)
				if g.odds(2) {
					b -= k
				}
				r, ok := g.add(Node{Op: "transpose", Args: []Ref{x}, Ints: []int{a, b}})
				if ok {
					g.setMag(r, g.getMag(x))
				}
				return ok
			},
		},
		&row{
			name:  "slice",
			infer: sliceInfer(false),
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.Slice(a[0], n.Ints[0], n.Ints[1], n.Ints[2]))
			},
			src:    func(n *Node, a []string) string { return fmt.Sprintf("dsl.Slice(%s, %s)", a[0], intsSrc(n.Ints)) },
			weight: 3,
			draw:   drawSlice(false),
		},
		&row{
			name:  "select",
			infer: sliceInfer(true),
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.Select(a[0], n.Ints[0], n.Ints[1]))
			},
			src:    func(n *Node, a []string) string { return fmt.Sprintf("dsl.Select(%s, %s)", a[0], intsSrc(n.Ints)) },
			weight: 2,
			draw:   drawSlice(true),
		},
		&row{
			name:  "concat",
			infer: concatInfer(false),
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.Concat(n.Ints[0], a...))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("dsl.Concat(%d, %s)", n.Ints[0], joinArgs(a))
			},
			weight: 3,
			draw:   drawConcat(false),
		},
		&row{
			name:  "stack",
			infer: concatInfer(true),
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.Stack(n.Ints[0], a...))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("dsl.Stack(%d, %s)", n.Ints[0], joinArgs(a))
			},
			weight: 2,
			draw:   drawConcat(true),
		},
		&row{
			name:    "matmul",
			inexact: projected,
			infer:   matmulInfer(false),
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.MatMulT(a[0], a[1], bit(n, 0), bit(n, 1)))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("dsl.MatMulT(%s, %s, %s, %s)", a[0], a[1], goBool(bit(n, 0)), goBool(bit(n, 1)))
			},
			weight: 4,
			draw:   drawMatmul("matmul"),
		},
		&row{
			name:    "batch_matmul",
			inexact: projected,
			infer:   matmulInfer(true),
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.BatchMatMul(a[0], a[1], bit(n, 0), bit(n, 1)))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("dsl.BatchMatMul(%s, %s, %s, %s)", a[0], a[1], goBool(bit(n, 0)), goBool(bit(n, 1)))
			},
			weight: 3,
			draw:   drawMatmul("batch_matmul"),
		},
	)
}

func joinArgs(a []string) string {
	s := ""
	for i, x := range a {
		if i > 0 {
			s += ", "
		}
		s += x
	}
	return s
}

func isPerm(p []int, n int) bool {
	if len(p) != n {
		return false
	}
	seen := make([]bool, n)
	for _, a := range p {
		if a < 0 || a >= n || seen[a] {
			return false
		}
		seen[a] = true
	}
	return true
}

// sliceInfer is slice's rule (Ints: axis, start, end), or with sel
// select's (Ints: axis, index; the axis is dropped).
func sliceInfer(sel bool) func(n *Node, in []Shape) ([]Shape, error) {
	return func(n *Node, in []Shape) ([]Shape, error) {
		if err := wantArgs(in, 1, 1); err != nil {
			return nil, err
		}
		x := in[0]
		want := 3
		if sel {
			want = 2
		}
		if len(n.Ints) != want {
			return nil, fmt.Errorf("%d attributes, want %d", len(n.Ints), want)
		}
		ax, err := normAxis(n.Ints[0], len(x))
		if err != nil {
			return nil, err
		}
		start, end := n.Ints[1], n.Ints[1]+1
		if !sel {
			end = n.Ints[2]
		}
		if x[ax] == Batch || start < 0 || end > x[ax] || start >= end {
			return nil, fmt.Errorf("slice [%d:%d) of axis %d of %s", start, end, ax, x)
		}
		out := x.Clone()
		if sel {
			out = append(out[:ax:ax], out[ax+1:]...)
		} else {
			out[ax] = end - start
		}
		return []Shape{out}, nil
	}
}

func drawSlice(sel bool) func(g *gen) bool {
	return func(g *gen) bool {
		x, ok := g.pick(func(s Shape) bool { return !s.HasBatch() && len(s) >= 1 || len(s) >= 2 })
		if !ok {
			return false
		}
		s := g.s.shapeOf(x)
		var axes []int
		for i, d := range s {
			if d != Batch {
				axes = append(axes, i)
			}
		}
		if len(axes) == 0 {
			return false
		}
		ax := axes[g.rng.IntN(len(axes))]
		d := s[ax]
		start := g.rng.IntN(d)
		attrs := []int{ax, start}
		if !sel {
			attrs = append(attrs, start+1+g.rng.IntN(d-start))
		}
		if g.odds(3) {
			attrs[0] -= len(s)
		}
		op := "slice"
		if sel {
			op = "select"
		}
		r, ok := g.add(Node{Op: op, Args: []Ref{x}, Ints: attrs})
		if ok {
			g.setMag(r, g.getMag(x))
		}
		return ok
	}
}

// concatInfer is concat's rule (Ints: axis; operands equal off it), or
// with stack stack's (operands equal; a new axis).
func concatInfer(stack bool) func(n *Node, in []Shape) ([]Shape, error) {
	return func(n *Node, in []Shape) ([]Shape, error) {
		if len(in) == 0 || len(n.Ints) != 1 {
			return nil, fmt.Errorf("%d operands, attributes %v", len(in), n.Ints)
		}
		x0 := in[0]
		rank := len(x0)
		if stack {
			rank++
		}
		ax, err := normAxis(n.Ints[0], rank)
		if err != nil {
			return nil, err
		}
		total := 0
		for i, x := range in {
			if len(x) != len(x0) {
				return nil, fmt.Errorf("operand %d %s, operand 0 %s", i, x, x0)
			}
			for j := range x {
				if (stack || j != ax) && x[j] != x0[j] {
					return nil, fmt.Errorf("operand %d %s, operand 0 %s", i, x, x0)
				}
			}
			if !stack {
				if x[ax] == Batch {
					return nil, fmt.Errorf("concatenation axis %d of %s is the batch", ax, x)
				}
				total += x[ax]
			}
		}
		if stack {
			out := append(append(x0[:ax:ax], len(in)), x0[ax:]...)
			return []Shape{out}, nil
		}
		out := x0.Clone()
		out[ax] = total
		return []Shape{out}, nil
	}
}

func drawConcat(stack bool) func(g *gen) bool {
	return func(g *gen) bool {
		x, ok := g.pick(func(s Shape) bool {
			if len(s) == 0 {
				return false
			}
			for _, d := range s {
				if d != Batch {
					return true
				}
			}
			// Concatenating joins along an axis that is not the batch:
			// a shape of batch axes only ([B], or [B, B] after an outer
			// product: seed 950 drew one) has none.
			return stack
		})
		if !ok {
			return false
		}
		s := g.s.shapeOf(x)
		ax := 0
		if stack {
			ax = g.rng.IntN(len(s) + 1)
		} else {
			var axes []int
			for i, d := range s {
				if d != Batch {
					axes = append(axes, i)
				}
			}
			ax = axes[g.rng.IntN(len(axes))]
		}
		args := []Ref{x}
		for k := 1 + g.rng.IntN(3); k > 0; k-- {
			want := s.Clone()
			if !stack {
				want[ax] = g.small()
			}
			switch {
			case g.odds(4):
				args = append(args, x) // the same tensor twice
			default:
				r, found := g.pick(func(t Shape) bool {
					if len(t) != len(s) {
						return false
					}
					for j := range t {
						if (stack || j != ax) && t[j] != s[j] || !stack && j == ax && t[j] == Batch {
							return false
						}
					}
					return true
				})
				if !found || g.odds(2) {
					if want.HasBatch() && want[0] != Batch {
						return false
					}
					r = g.input(want)
				}
				args = append(args, r)
			}
		}
		attr := ax
		if g.odds(3) {
			attr -= len(s)
			if stack {
				attr--
			}
		}
		op := "concat"
		if stack {
			op = "stack"
		}
		r, ok := g.add(Node{Op: op, Args: args, Ints: []int{attr}})
		if ok {
			m := 0.0
			for _, a := range args {
				m = math.Max(m, g.getMag(a))
			}
			g.setMag(r, m)
		}
		return ok
	}
}

// matDims are the rows and columns of op(s) (the last two dimensions,
// swapped when transposed).
func matDims(s Shape, trans bool) (int, int) {
	r, c := s[len(s)-2], s[len(s)-1]
	if trans {
		return c, r
	}
	return r, c
}

// matmulInfer is MatMul's rule (Ints: transA, transB): the batch
// dimensions equal, or one operand without them; with full, BatchMatMul's
// (the batch dimensions broadcast).
func matmulInfer(full bool) func(n *Node, in []Shape) ([]Shape, error) {
	return func(n *Node, in []Shape) ([]Shape, error) {
		if err := wantArgs(in, 2, 2); err != nil {
			return nil, err
		}
		a, b := in[0], in[1]
		if len(a) < 2 || len(b) < 2 {
			return nil, fmt.Errorf("operands %s and %s need rank ≥ 2", a, b)
		}
		m, k := matDims(a, bit(n, 0))
		k2, nn := matDims(b, bit(n, 1))
		if k != k2 {
			return nil, fmt.Errorf("inner dimensions of %s and %s differ", a, b)
		}
		ba, bb := a[:len(a)-2], b[:len(b)-2]
		var batch Shape
		switch {
		case full:
			var err error
			if batch, err = broadcast(ba, bb); err != nil {
				return nil, err
			}
		case len(ba) == 0:
			batch = bb
		case len(bb) == 0 || ba.Eq(bb):
			batch = ba
		default:
			return nil, fmt.Errorf("batch dimensions %s and %s (MatMul needs them equal or one side without)", ba, bb)
		}
		return []Shape{append(batch.Clone(), m, nn)}, nil
	}
}

func drawMatmul(op string) func(g *gen) bool {
	return func(g *gen) bool {
		a, ok := g.pick(func(s Shape) bool { return len(s) >= 2 })
		if !ok {
			return false
		}
		a = g.bounded(a, 30)
		sa := g.s.shapeOf(a)
		ta, tb := g.odds(3), g.odds(3)
		_, k := matDims(sa, ta)
		batch := sa[:len(sa)-2]
		switch {
		case len(batch) == 0:
			if g.odds(3) {
				batch = Shape{g.small()}
			}
		case g.odds(3):
			batch = nil
		case op == "batch_matmul":
			batch = batch.Clone()
			for i := range batch {
				if g.odds(2) {
					batch[i] = 1
				}
			}
			if g.odds(3) {
				batch = append(Shape{g.small()}, batch...)
			}
		}
		n := g.size()
		bs := append(batch.Clone(), k, n)
		if tb {
			bs[len(bs)-2], bs[len(bs)-1] = n, k
		}
		var b Ref
		found := false
		if !g.odds(3) {
			b, found = g.pick(func(s Shape) bool {
				if len(s) < 2 {
					return false
				}
				k2, _ := matDims(s, tb)
				_, err := matmulInfer(op == "batch_matmul")(&Node{Ints: []int{b2i(ta), b2i(tb)}}, []Shape{sa, s})
				return k2 == k && err == nil
			})
		}
		if !found {
			switch {
			case !bs.HasBatch():
				b = g.param(bs)
			case bs[0] == Batch:
				b = g.input(bs)
			default:
				return false
			}
		}
		b = g.bounded(b, 30)
		r, ok := g.add(Node{Op: op, Args: []Ref{a, b}, Ints: []int{b2i(ta), b2i(tb)}})
		if ok {
			kk := float64(k)
			if k == Batch {
				kk = 7
			}
			g.setMag(r, g.getMag(a)*g.getMag(b)*math.Sqrt(kk))
		}
		return ok
	}
}
