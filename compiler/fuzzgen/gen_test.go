package fuzzgen

import (
	"math/rand/v2"
	"testing"
)

// TestGenerateBuilds draws many specs and declares each with the DSL: the
// generator's shape rules must agree with the DSL's (a disagreement is a
// bug in one of them), and every op must be drawn.
func TestGenerateBuilds(t *testing.T) {
	n := 600
	if testing.Short() {
		n = 150
	}
	seen := map[string]int{}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		s := Generate(seed, Config{})
		for _, op := range s.Ops() {
			seen[op]++
		}
		if _, err := s.Build(); err != nil {
			t.Errorf("seed %d: %v\n%s", seed, err, s.Source("Model"))
		}
	}
	for _, op := range OpNames() {
		if seen[op] == 0 {
			t.Errorf("op %s never drawn in %d specs", op, n)
		}
	}
	t.Logf("ops drawn: %v", seen)
}

// TestKinkSkipsNoise: an op with a kink at 0 (abs, relu, max, max
// pooling) does not take a result that is 0 in exact arithmetic, here
// the mean of a LayerNorm's output over its normalised axis (fuzz_405:
// abs of it made every gradient's sign the rounding's), while ops
// without a kink, and the kinks on the LayerNorm's output itself, do.
func TestKinkSkipsNoise(t *testing.T) {
	g := &gen{rng: rand.New(rand.NewPCG(1, 2)), used: map[Ref]bool{}, mag: map[Ref]float64{},
		zeroMean: map[Ref][]int{}, noise: map[Ref]bool{}, s: &Spec{DType: "f32"}}
	x := g.input(Shape{3, 5})
	ln, _ := g.add(Node{Op: "layernorm", Name: "ln", Args: []Ref{x}})
	mean, _ := g.add(Node{Op: "mean", Args: []Ref{ln}, Ints: []int{-1}, Str: "keep"})
	neg, _ := g.add(Node{Op: "neg", Args: []Ref{mean}})
	part, _ := g.add(Node{Op: "mean", Args: []Ref{ln}, Ints: []int{0}, Str: "keep"})
	twice, _ := g.add(Node{Op: "add", Args: []Ref{mean, mean}}) // fuzz_553
	plus, _ := g.add(Node{Op: "add", Args: []Ref{mean, part}})
	for r, want := range map[Ref]bool{ln: false, mean: true, neg: true, part: false, twice: true, plus: false} {
		if g.noise[r] != want {
			t.Errorf("node %d (%s): noise %v, want %v", r.N, g.s.Nodes[r.N].Op, g.noise[r], want)
		}
	}
	for _, op := range []string{"abs", "relu", "max"} {
		g.pool = []Ref{mean, neg, twice}
		if table[op].draw(g) {
			t.Errorf("%s drew with only noise to take: %+v", op, g.s.Nodes[len(g.s.Nodes)-1])
		}
		g.pool = []Ref{ln}
		if !table[op].draw(g) {
			t.Errorf("%s did not draw on a LayerNorm's output", op)
		}
	}
	g.pool = []Ref{mean}
	if !table["tanh"].draw(g) {
		t.Error("tanh (no kink) did not take noise")
	}
}
