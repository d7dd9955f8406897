package fuzzgen

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/dsl"
)

// Inputs and parameters; layers with parameters: Linear, Conv2d, pooling,
// BatchNorm2d, Embedding and tied embeddings.

func declared(n *Node, in []Shape) ([]Shape, error) {
	if len(in) != 0 {
		return nil, fmt.Errorf("a source takes no operands")
	}
	for _, d := range n.Ints {
		if d < 1 && d != Batch {
			return nil, fmt.Errorf("dimension %d", d)
		}
	}
	return []Shape{Shape(n.Ints).Clone()}, nil
}

// dtSrc is the Go name of the spec's dtype.
func dtSrc(dt dsl.DType) string {
	if dt == dsl.F64 {
		return "dsl.F64"
	}
	return "dsl.F32"
}

// window resolves a Conv2d or pooling window as the DSL does (zero takes
// the default) and computes the output size along an axis of h.
func outSize(h, k, s, p, d int) int {
	span := h + 2*p - d*(k-1) - 1
	if span < 0 {
		return 0
	}
	return span/s + 1
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// windowsTouch reports whether every window along an axis reads an
// element of the input (not only padding).
func windowsTouch(h, k, s, p, d, out int) bool {
	for o := 0; o < out; o++ {
		touch := false
		for i := 0; i < k; i++ {
			y := o*s - p + i*d
			touch = touch || y >= 0 && y < h
		}
		if !touch {
			return false
		}
	}
	return true
}

func image(x Shape) error {
	if len(x) != 4 || !x[1:].Static() {
		return fmt.Errorf("input %s must be N×C×H×W with static C, H, W", x)
	}
	return nil
}

func isImage(s Shape) bool { return image(s) == nil }

// imageInput picks a 4-D result, or declares an image input.
func (g *gen) imageInput() Ref {
	return g.pickOr(isImage, func() Shape {
		return Shape{g.lead(), g.small(), 2 + g.rng.IntN(7), 2 + g.rng.IntN(7)}
	})
}

func init() {
	register(
		&row{
			name:  "input",
			infer: declared,
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(b.m.Input(b.name(n), b.dt, dims(n.Ints)...))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("m.Input(%q, DT, %s)", n.Name, dimsSrc(n.Ints))
			},
		},
		&row{
			name:  "labels",
			infer: declared,
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(b.m.Labels(b.name(n), dims(n.Ints)...))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("m.Labels(%q, %s) // classes in [0, %d)", n.Name, dimsSrc(n.Ints), n.K)
			},
		},
		&row{
			name:  "tokens",
			infer: declared,
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(b.m.Tokens(b.name(n), dims(n.Ints)...))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("m.Tokens(%q, %s) // ids in [0, %d)", n.Name, dimsSrc(n.Ints), n.K)
			},
		},
		&row{
			// mask is an i32 0/1 input; Str "key0" keeps its first
			// column 0 (a key every query may attend to).
			name:  "mask",
			infer: declared,
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(b.m.Tokens(b.name(n), dims(n.Ints)...))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("m.Tokens(%q, %s) // a 0/1 mask", n.Name, dimsSrc(n.Ints))
			},
		},
		&row{
			name: "param",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if Shape(n.Ints).HasBatch() {
					return nil, fmt.Errorf("a parameter has no batch dimension")
				}
				return declared(n, in)
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(b.m.Param(b.name(n), b.dt, dsl.Uniform(-n.F, n.F), n.Ints...))
			},
			src: func(n *Node, a []string) string {
				s := fmt.Sprintf("m.Param(%q, DT, dsl.Uniform(%s, %s)", n.Name, goFloat(-n.F), goFloat(n.F))
				if len(n.Ints) > 0 {
					s += ", " + intsSrc(n.Ints)
				}
				return s + ")"
			},
		},
		&row{
			// linear: K output features; Str "nobias" for LinearNoBias.
			name:    "linear",
			inexact: projected,
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				x := in[0]
				if len(x) < 1 || x[len(x)-1] == Batch || n.K < 1 {
					return nil, fmt.Errorf("input %s needs a static last dimension", x)
				}
				out := x.Clone()
				out[len(out)-1] = n.K
				return []Shape{out}, nil
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				if n.Str == "nobias" {
					return one(b.m.LinearNoBias(b.name(n), a[0], n.K))
				}
				return one(b.m.Linear(b.name(n), a[0], n.K))
			},
			src: func(n *Node, a []string) string {
				f := "Linear"
				if n.Str == "nobias" {
					f = "LinearNoBias"
				}
				return fmt.Sprintf("m.%s(%q, %s, %d)", f, n.Name, a[0], n.K)
			},
			weight: 8,
			draw: func(g *gen) bool {
				x := g.pickOr(func(s Shape) bool { return len(s) >= 2 && s[len(s)-1] != Batch },
					func() Shape { return append(g.shape(1+g.rng.IntN(2)), g.size()) })
				if s := g.s.shapeOf(x); len(s) == 0 || s[len(s)-1] == Batch {
					return false
				}
				x = g.bounded(x, 100)
				nb := ""
				if g.odds(4) {
					nb = "nobias"
				}
				r, ok := g.add(Node{Op: "linear", Name: g.name("fc"), Args: []Ref{x}, K: g.size(), Str: nb})
				if ok {
					g.setMag(r, g.getMag(x)+1)
				}
				return ok
			},
		},
		&row{
			// conv2d: Ints out, kernel, stride, padding, dilation, groups
			// (zero: the DSL's default); Str "nobias".
			name:    "conv2d",
			inexact: sharedGEMM,
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				x := in[0]
				if err := image(x); err != nil {
					return nil, err
				}
				if len(n.Ints) != 6 {
					return nil, fmt.Errorf("%d attributes, want 6", len(n.Ints))
				}
				out, k := n.Ints[0], n.Ints[1]
				s, p, d, grp := orDefault(n.Ints[2], 1), n.Ints[3], orDefault(n.Ints[4], 1), orDefault(n.Ints[5], 1)
				if k < 1 || out < 1 || s < 1 || p < 0 || d < 1 || grp < 1 || x[1]%grp != 0 || out%grp != 0 {
					return nil, fmt.Errorf("conv %v on %s", n.Ints, x)
				}
				oh, ow := outSize(x[2], k, s, p, d), outSize(x[3], k, s, p, d)
				if oh < 1 || ow < 1 {
					return nil, fmt.Errorf("window %v does not fit %s", n.Ints, x)
				}
				return []Shape{{x[0], out, oh, ow}}, nil
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				c := dsl.Conv{Stride: n.Ints[2], Padding: n.Ints[3], Dilation: n.Ints[4], Groups: n.Ints[5], NoBias: n.Str == "nobias"}
				return one(b.m.Conv2d(b.name(n), a[0], n.Ints[0], n.Ints[1], c))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("m.Conv2d(%q, %s, %d, %d, dsl.Conv{Stride: %d, Padding: %d, Dilation: %d, Groups: %d, NoBias: %v})",
					n.Name, a[0], n.Ints[0], n.Ints[1], n.Ints[2], n.Ints[3], n.Ints[4], n.Ints[5], n.Str == "nobias")
			},
			weight: 5,
			draw: func(g *gen) bool {
				x := g.bounded(g.imageInput(), 100)
				s := g.s.shapeOf(x)
				if !isImage(s) {
					return false
				}
				c := s[1]
				var divs []int
				for d := 1; d <= c; d++ {
					if c%d == 0 {
						divs = append(divs, d)
					}
				}
				grp := divs[g.rng.IntN(len(divs))]
				if g.odds(2) {
					grp = 1
				}
				attrs := []int{grp * (1 + g.rng.IntN(3)), 1 + g.rng.IntN(3), g.rng.IntN(3), g.rng.IntN(3), g.rng.IntN(3), grp}
				if grp == 1 && g.odds(2) {
					attrs[5] = 0
				}
				nb := ""
				if g.odds(4) {
					nb = "nobias"
				}
				r, ok := g.add(Node{Op: "conv2d", Name: g.name("conv"), Args: []Ref{x}, Ints: attrs, Str: nb})
				if ok {
					g.setMag(r, g.getMag(x)+1)
				}
				return ok
			},
		},
		&row{
			// maxpool: Ints kernel, stride, padding, dilation (zero: the
			// DSL's default).
			name:  "maxpool",
			infer: poolInfer(true),
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.MaxPool2d(a[0], n.Ints[0], dsl.Pool{Stride: n.Ints[1], Padding: n.Ints[2], Dilation: n.Ints[3]}))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("dsl.MaxPool2d(%s, %d, dsl.Pool{Stride: %d, Padding: %d, Dilation: %d})", a[0], n.Ints[0], n.Ints[1], n.Ints[2], n.Ints[3])
			},
			weight: 3,
			draw:   drawPool("maxpool"),
		},
		&row{
			name:  "avgpool",
			infer: poolInfer(false),
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.AvgPool2d(a[0], n.Ints[0], dsl.Pool{Stride: n.Ints[1], Padding: n.Ints[2]}))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("dsl.AvgPool2d(%s, %d, dsl.Pool{Stride: %d, Padding: %d})", a[0], n.Ints[0], n.Ints[1], n.Ints[2])
			},
			weight: 2,
			draw:   drawPool("avgpool"),
		},
		&row{
			// batchnorm2d: F momentum (0: the default 0.1).
			name: "batchnorm2d",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				return []Shape{in[0].Clone()}, image(in[0])
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(b.m.BatchNorm2d(b.name(n), a[0], dsl.BatchNorm{Momentum: n.F}))
			},
			// Fused, the statistics' sums share a pass over the input
			// shifted by the running mean.
			inexact: always,
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("m.BatchNorm2d(%q, %s, dsl.BatchNorm{Momentum: %s})", n.Name, a[0], goFloat(n.F))
			},
			weight: 2,
			draw: func(g *gen) bool {
				x := g.imageInput()
				s := g.s.shapeOf(x)
				// torch needs more than one value per channel in training.
				if !isImage(s) || s[2]*s[3] < 2 {
					return false
				}
				r, ok := g.add(Node{Op: "batchnorm2d", Name: g.name("bn"), Args: []Ref{x}, F: pick(g, 0.0, 0.3)})
				if ok {
					g.setMag(r, 4)
				}
				return ok
			},
		},
		&row{
			// embedding: Ints vocabulary, dimension; the ids are a tokens
			// input.
			name: "embedding",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				if len(n.Ints) != 2 || n.Ints[0] < 1 || n.Ints[1] < 1 {
					return nil, fmt.Errorf("vocabulary and dimension %v", n.Ints)
				}
				return []Shape{append(in[0].Clone(), n.Ints[1])}, nil
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(b.m.Embedding(b.name(n), a[0], n.Ints[0], n.Ints[1], b.dt))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("m.Embedding(%q, %s, %d, %d, DT)", n.Name, a[0], n.Ints[0], n.Ints[1])
			},
			weight: 3,
			draw: func(g *gen) bool {
				v := g.size() + 1
				ids := g.intInput("tokens", g.shape(1+g.rng.IntN(3)), v)
				r, ok := g.add(Node{Op: "embedding", Name: g.name("emb"), Args: []Ref{ids}, Ints: []int{v, g.size()}})
				if ok {
					g.setMag(r, 4)
				}
				return ok
			},
		},
		&row{
			// embed gathers rows of a float [V, D] result (a tied weight)
			// by a tokens input's ids.
			name: "embed",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 2, 2); err != nil {
					return nil, err
				}
				w := in[0]
				if len(w) != 2 || !w.Static() {
					return nil, fmt.Errorf("weight %s must be a static [vocab, dim]", w)
				}
				return []Shape{append(in[1].Clone(), w[1])}, nil
			},
			build:  func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor { return one(dsl.Embed(a[0], a[1])) },
			src:    func(n *Node, a []string) string { return fmt.Sprintf("dsl.Embed(%s, %s)", a[0], a[1]) },
			weight: 2,
			draw: func(g *gen) bool {
				w := g.pickOr(func(s Shape) bool { return len(s) == 2 && s.Static() },
					func() Shape { return Shape{g.size(), g.size()} })
				ws := g.s.shapeOf(w)
				if len(ws) != 2 || !ws.Static() {
					return false
				}
				ids := g.intInput("tokens", g.shape(1+g.rng.IntN(2)), ws[0])
				r, ok := g.add(Node{Op: "embed", Args: []Ref{w, ids}})
				if ok {
					g.setMag(r, g.getMag(w))
				}
				return ok
			},
		},
	)
}

// poolInfer is MaxPool2d's rule (Ints kernel, stride, padding,
// dilation), or AvgPool2d's (kernel, stride, padding).
func poolInfer(isMax bool) func(n *Node, in []Shape) ([]Shape, error) {
	return func(n *Node, in []Shape) ([]Shape, error) {
		if err := wantArgs(in, 1, 1); err != nil {
			return nil, err
		}
		x := in[0]
		if err := image(x); err != nil {
			return nil, err
		}
		want := 3
		if isMax {
			want = 4
		}
		if len(n.Ints) != want {
			return nil, fmt.Errorf("%d attributes, want %d", len(n.Ints), want)
		}
		k, s, p, d := n.Ints[0], orDefault(n.Ints[1], n.Ints[0]), n.Ints[2], 1
		if isMax {
			d = orDefault(n.Ints[3], 1)
		}
		if k < 1 || s < 1 || p < 0 || d < 1 || 2*p > k {
			return nil, fmt.Errorf("pool %v", n.Ints)
		}
		oh, ow := outSize(x[2], k, s, p, d), outSize(x[3], k, s, p, d)
		if oh < 1 || ow < 1 {
			return nil, fmt.Errorf("window %v does not fit %s", n.Ints, x)
		}
		if isMax && (!windowsTouch(x[2], k, s, p, d, oh) || !windowsTouch(x[3], k, s, p, d, ow)) {
			return nil, fmt.Errorf("a window %v lies wholly in the padding of %s", n.Ints, x)
		}
		return []Shape{{x[0], x[1], oh, ow}}, nil
	}
}

func drawPool(op string) func(g *gen) bool {
	return func(g *gen) bool {
		g.kink = op == "maxpool"
		x := g.imageInput()
		g.kink = false
		if !isImage(g.s.shapeOf(x)) {
			return false
		}
		k := 1 + g.rng.IntN(3)
		attrs := []int{k, g.rng.IntN(3), g.rng.IntN(k/2 + 1)}
		if op == "maxpool" {
			attrs = append(attrs, g.rng.IntN(3))
		}
		r, ok := g.add(Node{Op: op, Args: []Ref{x}, Ints: attrs})
		if ok {
			g.setMag(r, math.Max(g.getMag(x), 1))
		}
		return ok
	}
}
