package fuzzgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Config steers Generate.
type Config struct {
	// DType is "f32" or "f64"; empty draws one.
	DType string
	// Ops is the number of ops drawn for the body (0: 3 to 9).
	Ops int
	// Opt is the optimizer; nil draws one.
	Opt *Opt
	// Only, when set, restricts the drawn ops to these (inputs and the
	// loss are drawn as always).
	Only []string
	// NoBatch draws models without the symbolic batch dimension; Batch
	// forces it (neither: either, by chance).
	NoBatch, Batch bool
	// BatchSize is the size the batch dimension takes when the model
	// runs (0: drawn).
	BatchSize int
}

// GroupConfig is the configuration the specs of one group share (a
// program has one dtype, optimizer and batch size), drawn from seed.
func GroupConfig(seed uint64) Config {
	rng := rand.New(rand.NewPCG(seed, 0x67726f75))
	o := RandomOpt(rng)
	return Config{DType: []string{"f32", "f64"}[rng.IntN(2)], Opt: &o, BatchSize: []int{1, 2, 3, 3, 5, 7}[rng.IntN(6)]}
}

// sizes are the dimensions drawn: 1 and odd primes, with a few small even
// and composite sizes.
var sizes = []int{1, 1, 2, 2, 3, 3, 3, 4, 5, 5, 6, 7, 7, 8, 11, 13}

// gen is the state of one drawing.
type gen struct {
	rng  *rand.Rand
	s    *Spec
	cfg  Config
	pool []Ref // float results that later ops may take
	used map[Ref]bool
	// mag estimates each float result's largest magnitude, to keep exp,
	// powers and products finite.
	mag map[Ref]float64
	// zeroMean holds, for results whose mean over some axes is 0 in exact
	// arithmetic (a LayerNorm's output over its last axis, a batch norm's
	// over all but the channels, at their initial weight 1 and bias 0),
	// those axes; noise marks results that are 0 in exact arithmetic, so
	// that what is computed is rounding noise (see noiseOf).
	zeroMean map[Ref][]int
	noise    map[Ref]bool
	// kink is set while a draw picks the operand of an op with a kink at
	// 0 (abs, relu, max): it does not take noise, whose sign is the
	// rounding's (fuzz_405: abs of the mean of a LayerNorm's output, so
	// that every gradient's sign differed between two correct runs).
	kink   bool
	names  int
	batch  bool // inputs get the batch dimension
	fails  []string
	noDrop bool // no dropout in this spec
}

// Generate draws one random model from seed.
func Generate(seed uint64, cfg Config) *Spec {
	g := &gen{rng: rand.New(rand.NewPCG(seed, 0x66757a7a)), cfg: cfg, used: map[Ref]bool{}, mag: map[Ref]float64{},
		zeroMean: map[Ref][]int{}, noise: map[Ref]bool{}}
	dt := cfg.DType
	if dt == "" {
		dt = []string{"f32", "f64"}[g.rng.IntN(2)]
	}
	g.s = &Spec{Name: fmt.Sprintf("fuzz_%d", seed), Seed: seed, Data: seed, DType: dt}
	switch {
	case cfg.NoBatch:
	case cfg.Batch:
		g.batch = true
	default:
		g.batch = g.rng.IntN(4) != 0
	}
	g.s.Batch = []int{1, 2, 3, 3, 5, 7}[g.rng.IntN(6)]
	if cfg.BatchSize > 0 {
		g.s.Batch = cfg.BatchSize
	}
	g.noDrop = g.rng.IntN(3) != 0
	if cfg.Opt != nil {
		g.s.Opt = *cfg.Opt
	} else {
		g.s.Opt = RandomOpt(g.rng)
	}
	n := cfg.Ops
	if n <= 0 {
		n = 3 + g.rng.IntN(7)
	}
	rows := drawable(cfg.Only)
	total := 0
	for _, r := range rows {
		total += r.weight
	}
	for drawn, tries := 0, 0; drawn < n && tries < 20*n; tries++ {
		k := g.rng.IntN(total)
		var r *row
		for _, r = range rows {
			if k < r.weight {
				break
			}
			k -= r.weight
		}
		if r.draw(g) {
			drawn++
		}
	}
	if len(g.pool) == 0 {
		g.input(g.shape(1 + g.rng.IntN(3)))
	}
	g.finish()
	g.s.Prune()
	if !g.hasParams() {
		// A model with nothing to train does not compile: scale the
		// loss by a parameter.
		l, _ := g.add(Node{Op: "mul", Args: []Ref{g.s.Loss, g.param(Shape{})}})
		g.s.Loss = l
	}
	if g.odds(5) {
		g.checkpoint()
	}
	if err := g.s.Infer(); err != nil {
		panic(fmt.Sprintf("fuzzgen: seed %d drew an invalid spec: %v", seed, err))
	}
	return g.s
}

// drawable lists the rows draws pick from, in a fixed order.
func drawable(only []string) []*row {
	var out []*row
	for _, name := range OpNames() {
		r := table[name]
		if r.weight == 0 || r.draw == nil {
			continue
		}
		if only != nil && !contains(only, name) {
			continue
		}
		out = append(out, r)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// RandomOpt draws an optimizer: SGD (with momentum, dampening, Nesterov
// and weight decay by chance), Adam or AdamW.
func RandomOpt(rng *rand.Rand) Opt {
	lrs := []float64{1e-3, 1e-2, 0.05, 0.1}
	o := Opt{LR: lrs[rng.IntN(len(lrs))]}
	switch rng.IntN(3) {
	case 0:
		o.Kind = "sgd"
		if rng.IntN(2) == 0 {
			o.Momentum = []float64{0.5, 0.9}[rng.IntN(2)]
			switch rng.IntN(3) {
			case 0:
				o.Nesterov = true
			case 1:
				o.Dampening = 0.25
			}
		}
		if rng.IntN(2) == 0 {
			o.WeightDecay = 1e-2
		}
	case 1:
		o.Kind = "adam"
		o.LR = min(o.LR, 1e-2)
		if rng.IntN(2) == 0 {
			o.Beta1, o.Beta2, o.Eps = 0.8, 0.99, 1e-6
		}
		if rng.IntN(3) == 0 {
			o.WeightDecay = 1e-2
		}
	default:
		o.Kind = "adamw"
		o.LR = min(o.LR, 1e-2)
		switch rng.IntN(3) {
		case 0:
			o.NoWeightDecay = true
		case 1:
			o.WeightDecay = 0.1
		}
	}
	return o
}

// size draws a dimension.
func (g *gen) size() int { return sizes[g.rng.IntN(len(sizes))] }

// small draws a dimension of at most 5.
func (g *gen) small() int { return []int{1, 2, 3, 3, 4, 5}[g.rng.IntN(6)] }

// odds reports true with probability 1/n.
func (g *gen) odds(n int) bool { return g.rng.IntN(n) == 0 }

// shape draws a shape of the given rank, led by the batch dimension when
// the spec has one.
func (g *gen) shape(rank int) Shape {
	s := make(Shape, rank)
	for i := range s {
		s[i] = g.size()
	}
	if g.batch && rank > 0 && !g.odds(4) {
		s[0] = Batch
	}
	return s
}

// lead is the leading dimension of a new input: the batch dimension when
// the spec has one.
func (g *gen) lead() int {
	if g.batch {
		return Batch
	}
	return g.small()
}

// name is a fresh layer or input name.
func (g *gen) name(prefix string) string {
	g.names++
	return fmt.Sprintf("%s%d", prefix, g.names)
}

// add appends n, inferring its results' shapes, and returns its first
// result. A node the shape rules refuse is dropped, and the draw fails.
func (g *gen) add(n Node) (Ref, bool) {
	in := make([]Shape, len(n.Args))
	for i, a := range n.Args {
		in[i] = g.s.shapeOf(a)
	}
	out, err := table[n.Op].infer(&n, in)
	if err != nil {
		g.fails = append(g.fails, fmt.Sprintf("%s: %v", n.Op, err))
		return Ref{}, false
	}
	n.Out = out
	for _, a := range n.Args {
		g.used[a] = true
	}
	g.s.Nodes = append(g.s.Nodes, n)
	r := Ref{N: len(g.s.Nodes) - 1}
	for o := range out {
		if floatOp(n.Op) {
			g.pool = append(g.pool, Ref{r.N, o})
			g.mag[Ref{r.N, o}] = 3
		}
	}
	g.noiseOf(&n, r)
	return r, true
}

// zeroPreserving are the ops that map rounding noise around 0 to
// rounding noise around 0 (odd or flat at 0, or moving data).
var zeroPreserving = map[string]bool{"neg": true, "scale": true, "tanh": true, "gelu": true, "square": true,
	"sum": true, "mean": true, "reshape": true, "flatten": true, "permute": true, "transpose": true,
	"slice": true, "select": true}

// noiseOf records what n, just added as r, makes of rounding noise: the
// zero-mean axes of a normalisation's output and the noise that a sum
// over them, or an op that keeps 0 at 0 applied to noise, computes.
func (g *gen) noiseOf(n *Node, r Ref) {
	if len(n.Out) == 0 {
		return
	}
	rank := len(n.Out[0])
	switch n.Op {
	case "layernorm", "transformer":
		g.zeroMean[r] = []int{rank - 1}
		return
	case "encoder_layer", "decoder_layer":
		if len(n.Ints) > 2 && n.Ints[2] == 0 { // post-norm: ends in a LayerNorm
			g.zeroMean[r] = []int{rank - 1}
		}
		return
	case "batchnorm2d":
		g.zeroMean[r] = []int{0, 2, 3}
		return
	}
	if len(n.Args) == 0 {
		return
	}
	x := n.Args[0]
	if g.noise[x] && zeroPreserving[n.Op] {
		g.noise[r] = true
		return
	}
	// Noise plus or minus noise (fuzz_553: a mean of a LayerNorm's
	// output added to itself, then ReLU), noise times anything, noise
	// over anything.
	if len(n.Args) == 2 {
		a, b := g.noise[n.Args[0]], g.noise[n.Args[1]]
		switch n.Op {
		case "add", "sub":
			g.noise[r] = a && b
		case "mul":
			g.noise[r] = a || b
		case "div":
			g.noise[r] = a
		}
		if g.noise[r] {
			return
		}
	}
	if z := g.zeroMean[x]; z != nil && (n.Op == "sum" || n.Op == "mean") {
		xr := len(g.s.shapeOf(x))
		red := map[int]bool{}
		for _, a := range n.Ints {
			if a < 0 {
				a += xr
			}
			red[a] = true
		}
		all := true
		for _, a := range z {
			all = all && (n.Ints == nil || red[a])
		}
		if all {
			g.noise[r] = true
		}
	}
}

// floatOp reports whether op's results are float tensors (the integer
// inputs are not).
func floatOp(op string) bool { return op != "labels" && op != "tokens" && op != "mask" }

// pick returns a float result whose shape satisfies ok, preferring those
// no op has taken yet (so that the model grows chains, not a fan), or
// false when none does.
func (g *gen) pick(ok func(Shape) bool) (Ref, bool) {
	var fresh, any []Ref
	for _, r := range g.pool {
		if g.kink && g.noise[r] {
			continue
		}
		if s := g.s.shapeOf(r); ok == nil || ok(s) {
			any = append(any, r)
			if !g.used[r] {
				fresh = append(fresh, r)
			}
		}
	}
	if len(fresh) > 0 && !g.odds(4) {
		return fresh[g.rng.IntN(len(fresh))], true
	}
	if len(any) > 0 {
		return any[g.rng.IntN(len(any))], true
	}
	return Ref{}, false
}

// pickOr picks a result satisfying ok, or (sometimes anyway) declares a
// new input of shape mk().
func (g *gen) pickOr(ok func(Shape) bool, mk func() Shape) Ref {
	if !g.odds(6) {
		if r, found := g.pick(ok); found {
			return r
		}
	}
	return g.input(mk())
}

// input declares a float input.
func (g *gen) input(s Shape) Ref {
	r, _ := g.add(Node{Op: "input", Name: g.name("x"), Ints: s.Clone()})
	return r
}

// intInput declares an i32 input (labels, tokens or a mask) of shape s
// with values in [0, k).
func (g *gen) intInput(op string, s Shape, k int) Ref {
	prefix := map[string]string{"labels": "y", "tokens": "ids", "mask": "mask"}[op]
	r, _ := g.add(Node{Op: op, Name: g.name(prefix), Ints: s.Clone(), K: k})
	return r
}

func (g *gen) getMag(r Ref) float64 { return g.mag[r] }

func (g *gen) setMag(r Ref, m float64) {
	if math.IsNaN(m) || m > 1e30 {
		m = 1e30
	}
	g.mag[r] = m
}

// bounded returns r, or r squashed by tanh when its magnitude estimate
// exceeds limit.
func (g *gen) bounded(r Ref, limit float64) Ref {
	if g.getMag(r) <= limit {
		return r
	}
	t, ok := g.add(Node{Op: "tanh", Args: []Ref{r}})
	if !ok {
		return r
	}
	g.setMag(t, 1)
	return t
}

// positive returns a result that is at least margin everywhere, computed
// from r: square(r) + margin, or sigmoid(r) + margin.
func (g *gen) positive(r Ref, margin float64) Ref {
	if g.odds(2) {
		r = g.bounded(r, 30)
		sq, _ := g.add(Node{Op: "square", Args: []Ref{r}})
		p, _ := g.add(Node{Op: "addc", Args: []Ref{sq}, F: margin})
		m := g.getMag(r)
		g.setMag(p, m*m+margin)
		return p
	}
	s, _ := g.add(Node{Op: "sigmoid", Args: []Ref{r}})
	p, _ := g.add(Node{Op: "addc", Args: []Ref{s}, F: margin})
	g.setMag(p, 1+margin)
	return p
}

// leaves are the float results no op has taken, in order.
func (g *gen) leaves() []Ref {
	var out []Ref
	for _, r := range g.pool {
		if !g.used[r] && g.s.Nodes[r.N].Op != "input" {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].N < out[j].N || out[i].N == out[j].N && out[i].O < out[j].O })
	return out
}

// finish picks the prediction output among the leaves and sums a loss
// term of each leaf into the loss.
func (g *gen) finish() {
	leaves := g.leaves()
	if len(leaves) == 0 {
		// Every result was taken (or there are only inputs): the last
		// float result ends the model.
		x := g.pool[len(g.pool)-1]
		if g.s.Nodes[x.N].Op == "input" {
			x, _ = g.add(Node{Op: "tanh", Args: []Ref{x}})
		}
		leaves = []Ref{x}
	}
	g.s.Output = leaves[g.rng.IntN(len(leaves))]
	var loss Ref
	for i, r := range leaves {
		t := g.lossTerm(r)
		if i == 0 {
			loss = t
			continue
		}
		loss, _ = g.add(Node{Op: "add", Args: []Ref{loss, t}})
	}
	g.s.Loss = loss
}

// lossTerm reduces r to a scalar term of the loss: cross-entropy against
// labels, mean squared or absolute error against a target input, or a
// linear functional sum(r·w) with w an input (torch's (out*g).sum()).
func (g *gen) lossTerm(r Ref) Ref {
	s := g.s.shapeOf(r)
	kinds := []string{"mse", "dot", "l1"}
	if len(s) >= 2 && s[len(s)-1] >= 2 {
		kinds = append(kinds, "ce", "ce")
	}
	if len(s) == 0 {
		kinds = []string{"scalar"}
	}
	r = g.bounded(r, 1e4)
	var t Ref
	switch kinds[g.rng.IntN(len(kinds))] {
	case "ce":
		y := g.intInput("labels", s[:len(s)-1], s[len(s)-1])
		t, _ = g.add(Node{Op: "cross_entropy", Args: []Ref{r, y}})
	case "mse":
		d, _ := g.add(Node{Op: "sub", Args: []Ref{r, g.input(s)}})
		sq, _ := g.add(Node{Op: "square", Args: []Ref{d}})
		t = g.reduceAll(sq, "mean")
	case "l1":
		d, _ := g.add(Node{Op: "sub", Args: []Ref{r, g.input(s)}})
		a, _ := g.add(Node{Op: "abs", Args: []Ref{d}})
		t = g.reduceAll(a, "mean")
	case "dot":
		p, _ := g.add(Node{Op: "mul", Args: []Ref{r, g.input(s)}})
		t = g.reduceAll(p, "sum")
	case "scalar":
		t = r
	}
	return t
}

// reduceAll reduces r over every axis.
func (g *gen) reduceAll(r Ref, op string) Ref {
	t, _ := g.add(Node{Op: op, Args: []Ref{r}})
	return t
}

// checkpoint marks a run of nodes as one checkpointed segment.
func (g *gen) checkpoint() {
	n := len(g.s.Nodes)
	if n < 3 {
		return
	}
	i := g.rng.IntN(n - 2)
	j := i + 2 + g.rng.IntN(min(n-i-1, 5))
	for k := i; k < j && k < n; k++ {
		g.s.Nodes[k].Ckpt = 1
	}
}

// paramOps are the ops that declare parameters.
var paramOps = []string{"param", "linear", "conv2d", "batchnorm2d", "embedding", "layernorm", "mha",
	"rnn", "lstm", "encoder_layer", "decoder_layer", "decoder_only", "transformer"}

func (g *gen) hasParams() bool {
	for _, n := range g.s.Nodes {
		if contains(paramOps, n.Op) {
			return true
		}
	}
	return false
}
