package runtime

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// adamRun runs Adam's moment updates in float32 as the fused kernel does,
// on one element per gradient sequence, and returns the checkpoint tensors
// of a model whose fc.weight has those elements.
func adamRun(o Optimizer, seqs [][]float32) (names []string, ents map[string]ckptEntry, got map[string][]byte) {
	n := int64(len(seqs))
	m, v := make([]float32, n), make([]float32, n)
	b1, b2 := float32(o.Beta1), float32(o.Beta2)
	for k, gs := range seqs {
		for _, g := range gs {
			m[k] = b1*m[k] + (1-b1)*g
			v[k] = b2*v[k] + (1-b2)*(g*g)
		}
	}
	mn, vn := OptimizerPrefix+"fc.weight.exp_avg", OptimizerPrefix+"fc.weight.exp_avg_sq"
	names = []string{mn, vn}
	ents = map[string]ckptEntry{
		mn: {n: n, shape: []int64{n}, dtype: F32, opt: true},
		vn: {buf: 1, n: n, shape: []int64{n}, dtype: F32, opt: true},
	}
	return names, ents, map[string][]byte{mn: f32s(m...), vn: f32s(v...)}
}

// TestAdamBoundHoldsForRealRuns: the moments of float32 runs satisfy the
// load-time bound, for gradients that are constant, random, huge, tiny
// (their squares underflow), of alternating sign, and growing by β1/β2
// per step (the Cauchy–Schwarz equality case, where the bound is tight).
func TestAdamBoundHoldsForRealRuns(t *testing.T) {
	for _, o := range []Optimizer{
		{Kind: "adam", Beta1: 0.9, Beta2: 0.999},
		{Kind: "adamw", Beta1: 0.5, Beta2: 0.6},
		{Kind: "adam", Beta1: 0.99, Beta2: 0.9999},
		{Kind: "adam", Beta1: 0.95, Beta2: 0.9}, // β1² ≥ β2: the bound grows with t
	} {
		for _, steps := range []int{1, 2, 20, 300} {
			rng := rand.New(rand.NewPCG(uint64(steps), 3))
			seq := func(f func(j int) float64) []float32 {
				s := make([]float32, steps)
				for j := range s {
					s[j] = float32(f(j))
				}
				return s
			}
			grow := o.Beta2 / o.Beta1 // g_k ∝ (β2/β1)^k: equality in Cauchy–Schwarz
			seqs := [][]float32{
				seq(func(int) float64 { return 1 }),
				seq(func(int) float64 { return -3e18 }), // g² just below float32's overflow
				seq(func(int) float64 { return 1e-22 }), // g² underflows to a subnormal or zero
				seq(func(int) float64 { return 3e-19 }),
				seq(func(j int) float64 { return float64(1 - 2*(j%2)) }),
				seq(func(int) float64 { return rng.NormFloat64() * 1e4 }),
				seq(func(j int) float64 { return 1e-30 * math.Pow(grow, float64(j)) }),
				seq(func(j int) float64 { return 1e-3 * math.Pow(1/grow, float64(steps-1-j)) }),
				seq(func(j int) float64 {
					if j == steps-1 {
						return 1e6 // one huge gradient after small ones
					}
					return 1e-6
				}),
			}
			names, ents, got := adamRun(o, seqs)
			if err := checkAdamState(o, steps, names, ents, got); err != nil {
				t.Errorf("β=(%v,%v) after %d steps: %v", o.Beta1, o.Beta2, steps, err)
			}
			// The bound is close to tight: 1% more on the equality case's
			// exp_avg is rejected, while the count is still small.
			if o.Beta1*o.Beta1 < o.Beta2 && steps <= 20 {
				m := elem(got[names[0]], F32, 7)
				copy(got[names[0]][4*7:], f32s(float32(m*1.01)))
				if err := checkAdamState(o, steps, names, ents, got); err == nil {
					t.Errorf("β=(%v,%v) after %d steps: 1.01 × the tight exp_avg accepted", o.Beta1, o.Beta2, steps)
				}
			}
		}
	}
}

// TestAdamBoundRejects: issue 13's exp_avg of 3e38, a moment beyond the
// bound, and moments at step 0; each error names the tensor.
func TestAdamBoundRejects(t *testing.T) {
	o := Optimizer{Kind: "adam", Beta1: 0.9, Beta2: 0.999}
	names, ents, got := adamRun(o, [][]float32{{1, 1}, {2, 2}})
	if err := checkAdamState(o, 2, names, ents, got); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what string
		m    float32
		step int
		want string
	}{
		{"3e38", 3e38, 2, "more than Adam's moments allow"},
		{"5% above the bound at step 2", 0.19 * 1.05, 2, "more than Adam's moments allow"},
		{"at step 0", 0.19, 0, "at step 0"},
	} {
		_, _, g := adamRun(o, [][]float32{{1, 1}, {2, 2}})
		copy(g[names[0]], f32s(c.m))
		err := checkAdamState(o, c.step, names, ents, g)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), `"__optimizer__.fc.weight.exp_avg"`) {
			t.Errorf("%s: %v", c.what, err)
		}
	}
	// The bound at step t approaches the brief's C_∞ from below.
	cinf := 0.1 / math.Sqrt(0.001) / math.Sqrt(1-0.81/0.999)
	if c := adamBound(0.9, 0.999, 1<<20); math.Abs(c-cinf) > 1e-9*cinf || adamBound(0.9, 0.999, 20) >= cinf {
		t.Fatalf("C_t = %v, C_∞ = %v", c, cinf)
	}
	// SGD state has no such bound: only the finiteness every tensor gets.
	if err := checkAdamState(Optimizer{Kind: "sgd"}, 0, names, ents, got); err != nil {
		t.Fatal(err)
	}
}
