package fuzzgen

import (
	"fmt"

	"github.com/ngen-ml/ngen/dsl"
)

// Sequence and Transformer ops: cross-entropy, LayerNorm, softmax (masked
// too), multi-head attention, the positional encoding, the recurrences and
// the Transformer layers.

// seqInput picks a [N, T, E] result with static T and E, or declares one
// (E from e when e > 0).
func (g *gen) seqInput(e int) Ref {
	ok := func(s Shape) bool { return len(s) == 3 && s[1:].Static() && (e == 0 || s[2] == e) }
	return g.pickOr(ok, func() Shape {
		w := e
		if w == 0 {
			w = g.size()
		}
		return Shape{g.lead(), 1 + g.rng.IntN(5), w}
	})
}

// keyMask declares a 0/1 key-padding mask [n, t]; key0 keeps key 0
// unmasked, so that no query has every key masked.
func (g *gen) keyMask(n, t int, key0 bool) Ref {
	r := g.intInput("mask", Shape{n, t}, 2)
	if key0 {
		g.s.Nodes[r.N].Str = "key0"
	}
	return r
}

func seq3(x Shape) error {
	if len(x) != 3 || !x[1:].Static() {
		return fmt.Errorf("input %s must be [N, T, E] with static T and E", x)
	}
	return nil
}

// attnOpts are the Str flags of the attention rows.
func causal(n *Node) bool { return n.Str == "causal" }

func init() {
	register(
		&row{
			name: "cross_entropy",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 2, 2); err != nil {
					return nil, err
				}
				l, y := in[0], in[1]
				if len(l) < 1 || l[len(l)-1] == Batch || !y.Eq(l[:len(l)-1]) {
					return nil, fmt.Errorf("logits %s and labels %s", l, y)
				}
				return []Shape{{}}, nil
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(dsl.CrossEntropy(a[0], a[1]))
			},
			src:    func(n *Node, a []string) string { return fmt.Sprintf("dsl.CrossEntropy(%s, %s)", a[0], a[1]) },
			weight: 1,
			draw: func(g *gen) bool {
				x, ok := g.pick(func(s Shape) bool { return len(s) >= 2 && s[len(s)-1] >= 2 })
				if !ok {
					return false
				}
				s := g.s.shapeOf(x)
				if s[:len(s)-1].HasBatch() && s[0] != Batch {
					return false
				}
				y := g.intInput("labels", s[:len(s)-1], s[len(s)-1])
				r, ok := g.add(Node{Op: "cross_entropy", Args: []Ref{g.bounded(x, 1e4), y}})
				if ok {
					g.setMag(r, 10)
				}
				return ok
			},
		},
		&row{
			// layernorm: F eps (0: the default 1e-5).
			name: "layernorm",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				x := in[0]
				if len(x) < 2 || !x[1:].Static() {
					return nil, fmt.Errorf("input %s needs rank ≥ 2 and static dimensions after the first", x)
				}
				return []Shape{x.Clone()}, nil
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				if n.F != 0 {
					return one(b.m.LayerNorm(b.name(n), a[0], n.F))
				}
				return one(b.m.LayerNorm(b.name(n), a[0]))
			},
			src: func(n *Node, a []string) string {
				if n.F != 0 {
					return fmt.Sprintf("m.LayerNorm(%q, %s, %s)", n.Name, a[0], goFloat(n.F))
				}
				return fmt.Sprintf("m.LayerNorm(%q, %s)", n.Name, a[0])
			},
			inexact: always,
			weight:  3,
			draw: func(g *gen) bool {
				x, ok := g.pick(func(s Shape) bool { return len(s) >= 2 && s[1:].Static() && s[len(s)-1] >= 2 })
				if !ok {
					x = g.input(Shape{g.lead(), 2 + g.rng.IntN(7)})
				}
				r, ok := g.add(Node{Op: "layernorm", Name: g.name("ln"), Args: []Ref{g.bounded(x, 1e3)}, F: pick(g, 0.0, 0.0, 1e-3)})
				if ok {
					g.setMag(r, 4)
				}
				return ok
			},
		},
		&row{
			// softmax: Ints axis.
			name: "softmax",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				if len(n.Ints) != 1 {
					return nil, fmt.Errorf("softmax takes one axis")
				}
				ax, err := normAxis(n.Ints[0], len(in[0]))
				if err != nil {
					return nil, err
				}
				if in[0][ax] == Batch {
					return nil, fmt.Errorf("the softmax axis of %s is the batch", in[0])
				}
				return []Shape{in[0].Clone()}, nil
			},
			build:   func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor { return one(dsl.Softmax(a[0], n.Ints[0])) },
			src:     func(n *Node, a []string) string { return fmt.Sprintf("dsl.Softmax(%s, %d)", a[0], n.Ints[0]) },
			inexact: always,
			weight:  3,
			draw: func(g *gen) bool {
				x, ok := g.pick(func(s Shape) bool { return len(s) >= 1 && !s.Eq(Shape{Batch}) })
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
				ax := axes[g.rng.IntN(len(axes))]
				if g.odds(2) {
					ax -= len(s)
				}
				r, ok := g.add(Node{Op: "softmax", Args: []Ref{g.bounded(x, 30)}, Ints: []int{ax}})
				if ok {
					g.setMag(r, 1)
				}
				return ok
			},
		},
		&row{
			// masked_softmax: Str "causal"; a second operand is the
			// key-padding mask.
			name: "masked_softmax",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 2); err != nil {
					return nil, err
				}
				x := in[0]
				if len(x) < 2 || x[len(x)-1] == Batch {
					return nil, fmt.Errorf("input %s needs rank ≥ 2 and a static last axis", x)
				}
				if len(in) == 2 && !in[1].Eq(Shape{x[0], x[len(x)-1]}) {
					return nil, fmt.Errorf("mask %s for input %s", in[1], x)
				}
				return []Shape{x.Clone()}, nil
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				var kpm *dsl.Tensor
				if len(a) > 1 {
					kpm = a[1]
				}
				return one(dsl.MaskedSoftmax(a[0], causal(n), kpm))
			},
			src: func(n *Node, a []string) string {
				kpm := "nil"
				if len(a) > 1 {
					kpm = a[1]
				}
				return fmt.Sprintf("dsl.MaskedSoftmax(%s, %v, %s)", a[0], causal(n), kpm)
			},
			inexact: always,
			weight:  2,
			draw: func(g *gen) bool {
				x, ok := g.pick(func(s Shape) bool { return len(s) >= 2 && s[len(s)-1] != Batch })
				if !ok {
					return false
				}
				s := g.s.shapeOf(x)
				args := []Ref{g.bounded(x, 30)}
				if g.odds(2) {
					if s[0] == Batch || !s.HasBatch() {
						args = append(args, g.keyMask(s[0], s[len(s)-1], false))
					}
				}
				c := ""
				if g.odds(2) || len(args) == 1 {
					c = "causal"
				}
				r, ok := g.add(Node{Op: "masked_softmax", Args: args, Str: c})
				if ok {
					g.setMag(r, 1)
				}
				return ok
			},
		},
		&row{
			// mha: K heads, Str "causal", F the weights' dropout; operands
			// query, key, value and a key-padding mask.
			name: "mha",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 3, 4); err != nil {
					return nil, err
				}
				q, k, v := in[0], in[1], in[2]
				for _, x := range in[:3] {
					if err := seq3(x); err != nil {
						return nil, err
					}
				}
				e := q[2]
				if n.K < 1 || e%n.K != 0 || k[2] != e || v[2] != e || k[0] != q[0] || v[0] != q[0] || k[1] != v[1] {
					return nil, fmt.Errorf("query %s, key %s, value %s with %d heads", q, k, v, n.K)
				}
				if len(in) == 4 && !in[3].Eq(Shape{k[0], k[1]}) {
					return nil, fmt.Errorf("mask %s for keys %s", in[3], k)
				}
				return []Shape{q.Clone()}, nil
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				o := dsl.Attention{Causal: causal(n), Dropout: n.F}
				if len(a) > 3 {
					o.KeyPadding = a[3]
				}
				return one(b.m.MultiheadAttention(b.name(n), a[0], a[1], a[2], n.K, o))
			},
			src: func(n *Node, a []string) string {
				kpm := "nil"
				if len(a) > 3 {
					kpm = a[3]
				}
				return fmt.Sprintf("m.MultiheadAttention(%q, %s, %s, %s, %d, dsl.Attention{Causal: %v, KeyPadding: %s, Dropout: %s})",
					n.Name, a[0], a[1], a[2], n.K, causal(n), kpm, goFloat(n.F))
			},
			streams: func(n *Node) int { return b2i(n.F > 0) },
			noOracle: func(n *Node) string {
				if n.F > 0 {
					return "attention dropout"
				}
				return ""
			},
			inexact: always,
			weight:  3,
			draw: func(g *gen) bool {
				heads := 1 + g.rng.IntN(3)
				e := heads * (1 + g.rng.IntN(3))
				q := g.seqInput(e)
				sq := g.s.shapeOf(q)
				if seq3(sq) != nil || sq[2] != e {
					return false
				}
				args := []Ref{q, q, q}
				switch g.rng.IntN(3) {
				case 1: // cross-attention: key and value one tensor
					kv := g.pickOr(func(s Shape) bool { return seq3(s) == nil && s[0] == sq[0] && s[2] == e },
						func() Shape { return Shape{sq[0], 1 + g.rng.IntN(5), e} })
					args[1], args[2] = kv, kv
				case 2:
					k := g.pickOr(func(s Shape) bool { return seq3(s) == nil && s[0] == sq[0] && s[2] == e },
						func() Shape { return Shape{sq[0], 1 + g.rng.IntN(5), e} })
					tk := g.s.shapeOf(k)
					v := g.pickOr(func(s Shape) bool { return s.Eq(tk) }, func() Shape { return tk.Clone() })
					args[1], args[2] = k, v
				}
				for i := range args {
					args[i] = g.bounded(args[i], 30)
				}
				sk := g.s.shapeOf(args[1])
				if g.odds(2) && (sk[0] == Batch || !sk.HasBatch()) {
					args = append(args, g.keyMask(sk[0], sk[1], false))
				}
				c := ""
				if g.odds(2) {
					c = "causal"
				}
				p := 0.0
				if !g.noDrop && g.odds(3) {
					p = 0.25
				}
				r, ok := g.add(Node{Op: "mha", Name: g.name("mha"), Args: args, K: heads, Str: c, F: p})
				if ok {
					g.setMag(r, 4)
				}
				return ok
			},
		},
		&row{
			// pe: K table length, F dropout; Name the table's.
			name: "pe",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				x := in[0]
				if err := seq3(x); err != nil || x[1] > n.K {
					return nil, fmt.Errorf("input %s, table of %d", x, n.K)
				}
				return []Shape{x.Clone()}, nil
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(b.m.PositionalEncoding(b.name(n), a[0], n.K, n.F))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("m.PositionalEncoding(%q, %s, %d, %s)", n.Name, a[0], n.K, goFloat(n.F))
			},
			streams: func(n *Node) int { return b2i(n.F > 0) },
			weight:  1,
			draw: func(g *gen) bool {
				x := g.seqInput(0)
				s := g.s.shapeOf(x)
				if seq3(s) != nil {
					return false
				}
				p := 0.0
				if !g.noDrop && g.odds(2) {
					p = 0.25
				}
				r, ok := g.add(Node{Op: "pe", Name: g.name("pe"), Args: []Ref{x}, K: s[1] + g.rng.IntN(3), F: p})
				if ok {
					g.setMag(r, g.getMag(x)+1)
				}
				return ok
			},
		},
		recurRow("rnn"),
		recurRow("lstm"),
		&row{
			// encoder_layer: Ints heads, dim_feedforward, norm_first,
			// causal; Str the activation; F dropout; operands x and a
			// key-padding mask.
			name: "encoder_layer",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 2); err != nil {
					return nil, err
				}
				return layerInfer(n, in[0], nil, in[1:])
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				mk := dsl.Masks{SrcCausal: bit(n, 3)}
				if len(a) > 1 {
					mk.SrcKeyPadding = a[1]
				}
				return one(b.m.TransformerEncoderLayer(b.name(n), a[0], n.Ints[0], layerOpts(n), mk))
			},
			src: func(n *Node, a []string) string {
				kpm := "nil"
				if len(a) > 1 {
					kpm = a[1]
				}
				return fmt.Sprintf("m.TransformerEncoderLayer(%q, %s, %d, %s, dsl.Masks{SrcCausal: %v, SrcKeyPadding: %s})",
					n.Name, a[0], n.Ints[0], layerOptsSrc(n), bit(n, 3), kpm)
			},
			streams:  func(n *Node) int { return 4 * b2i(n.F > 0) },
			noOracle: layerNoOracle,
			inexact:  always,
			weight:   2,
			draw: func(g *gen) bool {
				heads, e := g.heads()
				x := g.seqInput(e)
				s := g.s.shapeOf(x)
				if seq3(s) != nil || s[2] != e {
					return false
				}
				args := []Ref{g.bounded(x, 30)}
				if g.odds(2) && (s[0] == Batch || !s.HasBatch()) {
					args = append(args, g.keyMask(s[0], s[1], true))
				}
				r, ok := g.add(Node{Op: "encoder_layer", Name: g.name("enc"), Args: args,
					Ints: []int{heads, 1 + g.rng.IntN(6), b2i(g.odds(2)), b2i(g.odds(2))}, Str: pick(g, "relu", "gelu"), F: g.layerDropout()})
				if ok {
					g.setMag(r, 5)
				}
				return ok
			},
		},
		&row{
			// decoder_layer: Ints heads, dim_feedforward, norm_first,
			// target causal; Str the activation; F dropout; operands
			// target, memory and the memory's key-padding mask.
			name: "decoder_layer",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 2, 3); err != nil {
					return nil, err
				}
				return layerInfer(n, in[0], in[1], in[2:])
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				mk := dsl.Masks{TgtCausal: bit(n, 3)}
				if len(a) > 2 {
					mk.MemoryKeyPadding = a[2]
				}
				return one(b.m.TransformerDecoderLayer(b.name(n), a[0], a[1], n.Ints[0], layerOpts(n), mk))
			},
			src: func(n *Node, a []string) string {
				kpm := "nil"
				if len(a) > 2 {
					kpm = a[2]
				}
				return fmt.Sprintf("m.TransformerDecoderLayer(%q, %s, %s, %d, %s, dsl.Masks{TgtCausal: %v, MemoryKeyPadding: %s})",
					n.Name, a[0], a[1], n.Ints[0], layerOptsSrc(n), bit(n, 3), kpm)
			},
			streams:  func(n *Node) int { return 6 * b2i(n.F > 0) },
			noOracle: layerNoOracle,
			inexact:  always,
			weight:   1,
			draw: func(g *gen) bool {
				heads, e := g.heads()
				x := g.seqInput(e)
				s := g.s.shapeOf(x)
				if seq3(s) != nil || s[2] != e {
					return false
				}
				mem := g.pickOr(func(t Shape) bool { return seq3(t) == nil && t[0] == s[0] && t[2] == e },
					func() Shape { return Shape{s[0], 1 + g.rng.IntN(5), e} })
				ms := g.s.shapeOf(mem)
				args := []Ref{g.bounded(x, 30), g.bounded(mem, 30)}
				if g.odds(2) && (ms[0] == Batch || !ms.HasBatch()) {
					args = append(args, g.keyMask(ms[0], ms[1], true))
				}
				r, ok := g.add(Node{Op: "decoder_layer", Name: g.name("dec"), Args: args,
					Ints: []int{heads, 1 + g.rng.IntN(6), b2i(g.odds(2)), b2i(g.odds(2))}, Str: pick(g, "relu", "gelu"), F: g.layerDropout()})
				if ok {
					g.setMag(r, 5)
				}
				return ok
			},
		},
		&row{
			// decoder_only: Ints heads, dim_feedforward; F dropout.
			name: "decoder_only",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 1, 1); err != nil {
					return nil, err
				}
				return layerInfer(n, in[0], nil, nil)
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				return one(b.m.DecoderOnlyBlock(b.name(n), a[0], n.Ints[0], n.Ints[1], n.F))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("m.DecoderOnlyBlock(%q, %s, %d, %d, %s)", n.Name, a[0], n.Ints[0], n.Ints[1], goFloat(n.F))
			},
			streams:  func(n *Node) int { return 4 * b2i(n.F > 0) },
			noOracle: layerNoOracle,
			inexact:  always,
			weight:   1,
			draw: func(g *gen) bool {
				heads, e := g.heads()
				x := g.seqInput(e)
				if s := g.s.shapeOf(x); seq3(s) != nil || s[2] != e {
					return false
				}
				r, ok := g.add(Node{Op: "decoder_only", Name: g.name("blk"), Args: []Ref{g.bounded(x, 30)},
					Ints: []int{heads, 1 + g.rng.IntN(6)}, F: g.layerDropout()})
				if ok {
					g.setMag(r, 5)
				}
				return ok
			},
		},
		&row{
			// transformer: Ints heads, encoder layers, decoder layers,
			// dim_feedforward, norm_first, target causal; Str the
			// activation; F dropout; operands source and target.
			name: "transformer",
			infer: func(n *Node, in []Shape) ([]Shape, error) {
				if err := wantArgs(in, 2, 2); err != nil {
					return nil, err
				}
				if len(n.Ints) != 6 || n.Ints[1] < 1 || n.Ints[2] < 1 {
					return nil, fmt.Errorf("attributes %v", n.Ints)
				}
				return layerInfer(&Node{Ints: []int{n.Ints[0], n.Ints[3]}}, in[1], in[0], nil)
			},
			build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
				o := dsl.TransformerOptions{DimFeedforward: n.Ints[3], Dropout: n.F, Activation: n.Str, NormFirst: n.Ints[4] != 0}
				return one(b.m.Transformer(b.name(n), a[0], a[1], n.Ints[0], n.Ints[1], n.Ints[2], o, dsl.Masks{TgtCausal: n.Ints[5] != 0}))
			},
			src: func(n *Node, a []string) string {
				return fmt.Sprintf("m.Transformer(%q, %s, %s, %d, %d, %d, dsl.TransformerOptions{DimFeedforward: %d, Dropout: %s, Activation: %q, NormFirst: %v}, dsl.Masks{TgtCausal: %v})",
					n.Name, a[0], a[1], n.Ints[0], n.Ints[1], n.Ints[2], n.Ints[3], goFloat(n.F), n.Str, n.Ints[4] != 0, n.Ints[5] != 0)
			},
			streams:  func(n *Node) int { return (4*n.Ints[1] + 6*n.Ints[2]) * b2i(n.F > 0) },
			noOracle: layerNoOracle,
			inexact:  always,
			weight:   1,
			draw: func(g *gen) bool {
				heads, e := g.heads()
				src := g.seqInput(e)
				s := g.s.shapeOf(src)
				if seq3(s) != nil || s[2] != e {
					return false
				}
				tgt := g.pickOr(func(t Shape) bool { return seq3(t) == nil && t[0] == s[0] && t[2] == e },
					func() Shape { return Shape{s[0], 1 + g.rng.IntN(5), e} })
				r, ok := g.add(Node{Op: "transformer", Name: g.name("tf"), Args: []Ref{g.bounded(src, 30), g.bounded(tgt, 30)},
					Ints: []int{heads, 1 + g.rng.IntN(2), 1 + g.rng.IntN(2), 1 + g.rng.IntN(6), b2i(g.odds(2)), b2i(g.odds(2))},
					Str:  pick(g, "relu", "gelu"), F: g.layerDropout()})
				if ok {
					g.setMag(r, 5)
				}
				return ok
			},
		},
	)
}

// heads draws a head count and an embedding width divisible by it.
func (g *gen) heads() (int, int) {
	h := 1 + g.rng.IntN(3)
	return h, h * (1 + g.rng.IntN(3))
}

func (g *gen) layerDropout() float64 {
	if g.noDrop || !g.odds(3) {
		return 0
	}
	return 0.25
}

func layerNoOracle(n *Node) string {
	if n.F > 0 {
		return "dropout inside a Transformer layer"
	}
	return ""
}

// layerInfer checks a Transformer layer's input x [N, T, E] (and memory
// [N, S, E]) for Ints[0] heads and Ints[1] feed-forward features, and the
// key-padding masks [N, S].
func layerInfer(n *Node, x, mem Shape, masks []Shape) ([]Shape, error) {
	if len(n.Ints) < 2 || n.Ints[0] < 1 || n.Ints[1] < 1 {
		return nil, fmt.Errorf("attributes %v", n.Ints)
	}
	if err := seq3(x); err != nil {
		return nil, err
	}
	if x[2]%n.Ints[0] != 0 {
		return nil, fmt.Errorf("width %d is not divisible by %d heads", x[2], n.Ints[0])
	}
	keys := x
	if mem != nil {
		if err := seq3(mem); err != nil || mem[0] != x[0] || mem[2] != x[2] {
			return nil, fmt.Errorf("memory %s for target %s", mem, x)
		}
		keys = mem
	}
	for _, m := range masks {
		if !m.Eq(Shape{keys[0], keys[1]}) {
			return nil, fmt.Errorf("mask %s for keys %s", m, keys)
		}
	}
	return []Shape{x.Clone()}, nil
}

func layerOpts(n *Node) dsl.TransformerOptions {
	return dsl.TransformerOptions{DimFeedforward: n.Ints[1], Dropout: n.F, Activation: n.Str, NormFirst: n.Ints[2] != 0}
}

func layerOptsSrc(n *Node) string {
	return fmt.Sprintf("dsl.TransformerOptions{DimFeedforward: %d, Dropout: %s, Activation: %q, NormFirst: %v}",
		n.Ints[1], goFloat(n.F), n.Str, n.Ints[2] != 0)
}

// recurRow is RNN's or LSTM's row: Ints hidden, layers, batch_first,
// initial states given, mask given; Str the RNN's nonlinearity; operands
// x, then h0 (and c0), then the mask. Results: out, hn (and cn).
func recurRow(op string) *row {
	lstm := op == "lstm"
	return &row{
		name:    op,
		inexact: sharedGEMM,
		infer: func(n *Node, in []Shape) ([]Shape, error) {
			if len(n.Ints) != 5 || n.Ints[0] < 1 || n.Ints[1] < 1 {
				return nil, fmt.Errorf("attributes %v", n.Ints)
			}
			h, layers, bf := n.Ints[0], n.Ints[1], bit(n, 2)
			states := 0
			if bit(n, 3) {
				states = 1 + b2i(lstm)
			}
			if err := wantArgs(in, 1+states+n.Ints[4], 1+states+n.Ints[4]); err != nil {
				return nil, err
			}
			x := in[0]
			if len(x) != 3 || x[2] == Batch {
				return nil, fmt.Errorf("input %s must be [B, T, features] or [T, B, features]", x)
			}
			bd, td := x[0], x[1]
			if !bf {
				bd, td = x[1], x[0]
			}
			if td == Batch {
				return nil, fmt.Errorf("input %s: the time axis is the batch", x)
			}
			st := Shape{layers, bd, h}
			for _, s := range in[1 : 1+states] {
				if !s.Eq(st) {
					return nil, fmt.Errorf("initial state %s, want %s", s, st)
				}
			}
			if n.Ints[4] == 1 && !in[len(in)-1].Eq(Shape{bd, td}) {
				return nil, fmt.Errorf("mask %s, want %s", in[len(in)-1], Shape{bd, td})
			}
			out := x.Clone()
			out[2] = h
			res := []Shape{out, st}
			if lstm {
				res = append(res, st.Clone())
			}
			return res, nil
		},
		build: func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor {
			o := dsl.Recurrent{NumLayers: n.Ints[1], BatchFirst: bit(n, 2), Nonlinearity: n.Str}
			k := 1
			if bit(n, 3) {
				o.H0 = a[k]
				k++
				if lstm {
					o.C0 = a[k]
					k++
				}
			}
			if bit(n, 4) {
				o.Mask = a[k]
			}
			if lstm {
				out, hn, cn := b.m.LSTM(b.name(n), a[0], n.Ints[0], o)
				return []*dsl.Tensor{out, hn, cn}
			}
			out, hn := b.m.RNN(b.name(n), a[0], n.Ints[0], o)
			return []*dsl.Tensor{out, hn}
		},
		src: func(n *Node, a []string) string {
			h0, c0, mask := "nil", "nil", "nil"
			k := 1
			if bit(n, 3) {
				h0 = a[k]
				k++
				if lstm {
					c0 = a[k]
					k++
				}
			}
			if bit(n, 4) {
				mask = a[k]
			}
			f := "RNN"
			if lstm {
				f = "LSTM"
			}
			return fmt.Sprintf("m.%s(%q, %s, %d, dsl.Recurrent{NumLayers: %d, BatchFirst: %v, Nonlinearity: %q, H0: %s, C0: %s, Mask: %s})",
				f, n.Name, a[0], n.Ints[0], n.Ints[1], bit(n, 2), n.Str, h0, c0, mask)
		},
		weight: 3,
		draw: func(g *gen) bool {
			bf := g.odds(2)
			x := g.pickOr(func(s Shape) bool {
				return len(s) == 3 && s[2] != Batch && (bf && s[1] != Batch || !bf && s[0] != Batch)
			}, func() Shape {
				t, f := 1+g.rng.IntN(5), g.size()
				if bf {
					return Shape{g.lead(), t, f}
				}
				if g.batch {
					// An input has the batch first; [T, B, F] comes from a
					// permute of one.
					return Shape{t, g.small(), f}
				}
				return Shape{t, g.small(), f}
			})
			s := g.s.shapeOf(x)
			if len(s) != 3 || s[2] == Batch || bf && s[1] == Batch || !bf && s[0] == Batch {
				return false
			}
			bd, td := s[0], s[1]
			if !bf {
				bd, td = s[1], s[0]
			}
			h, layers := g.size(), 1+g.rng.IntN(2)
			args := []Ref{g.bounded(x, 30)}
			ints := []int{h, layers, b2i(bf), 0, 0}
			if g.odds(2) {
				ints[3] = 1
				for k := 0; k < 1+b2i(lstm); k++ {
					args = append(args, g.bounded(g.input(Shape{layers, bd, h}), 3))
				}
			}
			if g.odds(3) && (bd == Batch || bd != Batch && !Shape{td}.HasBatch()) {
				ints[4] = 1
				args = append(args, g.intInput("mask", Shape{bd, td}, 2))
			}
			nl := ""
			if !lstm {
				nl = pick(g, "", "tanh", "relu")
			}
			r, ok := g.add(Node{Op: op, Name: g.name(op), Args: args, Ints: ints, Str: nl})
			if ok {
				for o := range g.s.Nodes[r.N].Out {
					g.setMag(Ref{r.N, o}, 3)
				}
			}
			return ok
		},
	}
}
