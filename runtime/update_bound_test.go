package runtime

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// kernelUpdate32 is one element of the lowered update in float32, each
// operation rounded as the update kernel rounds it (compiler/optimizer.go,
// codegen/guard.go's update check): the new parameter and state.
func kernelUpdate32(o Optimizer, r GroupRule, sc map[string]float64, p, g, s1, s2 float32) (p2, n1, n2 float32) {
	f := func(x float64) float32 { return float32(x) }
	k := func(name string) float32 { return f(sc[name+r.Suffix]) }
	switch o.Kind {
	case "adam", "adamw":
		gd := g
		if o.Kind == "adam" {
			gd = float32(g + float32(p*k("wd")))
		}
		m2 := float32(float32(s1*f(r.Beta1)) + float32(gd*f(1-r.Beta1)))
		v2 := float32(float32(s2*f(r.Beta2)) + float32(float32(gd*gd)*f(1-r.Beta2)))
		den := float32(float32(float32(math.Sqrt(float64(v2)))/k("bc2_sqrt")) + f(o.Eps))
		p0 := p
		if o.Kind == "adamw" {
			p0 = float32(p * k("decay"))
		}
		return float32(p0 - float32(k("step_size")*float32(m2/den))), m2, v2
	case "sgd":
		d := float32(g + float32(p*k("wd")))
		if r.Momentum != 0 {
			n1 = float32(float32(k("mom")*s1) + float32(k("damp")*d))
			if o.Nesterov {
				d = float32(d + float32(n1*f(r.Momentum)))
			} else {
				d = n1
			}
		}
		return float32(p - float32(k("lr")*d)), n1, 0
	}
	panic(o.Kind)
}

// TestUpdateBoundSound: whenever the largest |gradient| is at most gsafe,
// every element's update, computed as the kernel computes it in float32,
// stays within the update check's limit (half the largest float32), for
// elements anywhere within the bounds, the extremes included. Otherwise
// the check's fast path would let an overflowing update through.
func TestUpdateBoundSound(t *testing.T) {
	opts := []Optimizer{
		{Kind: "adam", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8},
		{Kind: "adam", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1},
		{Kind: "adamw", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01},
		{Kind: "adam", Beta1: 0, Beta2: 0.5, Eps: 1e-30},
		{Kind: "sgd"},
		{Kind: "sgd", Momentum: 0.9, Nesterov: true, WeightDecay: 1e-4},
		{Kind: "sgd", Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.5},
		// Parameter groups: each group's update within the bound.
		{Kind: "adamw", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Groups: []ParamGroup{{LRScale: 3, OwnDecay: true, Beta1: 0.5, Beta2: 0.9}}},
		{Kind: "adam", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Groups: []ParamGroup{{LRScale: 0.5, WeightDecay: 0.3, OwnDecay: true, Beta1: 0.9, Beta2: 0.999}}},
		{Kind: "sgd", Groups: []ParamGroup{{LRScale: 2, Momentum: 0.9}}},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	mag := func() float64 { return math.Pow(10, -3+rng.Float64()*41) } // 1e-3 .. 1e38
	lim := float32(math.MaxFloat32 / 2)
	fast := 0
	for trial := 0; trial < 4000; trial++ {
		o := opts[trial%len(opts)]
		s := &Session{plan: &Plan{DType: F32, Optimizer: o}}
		s.bound = updateBound{on: true, p: mag(), s1: mag(), s2: mag()}
		if o.Kind == "sgd" && o.Momentum == 0 && len(o.Groups) == 0 {
			s.bound.s1 = 0
		}
		if o.Kind == "sgd" {
			s.bound.s2 = 0
		}
		lr := []float64{1e-3, 0.1, 10, MaxLR}[rng.IntN(4)]
		sc := o.Scalars(1+rng.IntN(1000), lr, o.WeightDecay)
		g := s.gsafe(sc)
		if g < 0 {
			continue
		}
		fast++
		what := fmt.Sprintf("%s%+v bound %+v lr %g gsafe %g", o.Kind, o, s.bound, lr, g)
		pick := func(b float64) float32 {
			switch rng.IntN(4) {
			case 0:
				return float32(b) // the extreme
			case 1:
				return -float32(b)
			case 2:
				return 0
			}
			return float32((2*rng.Float64() - 1) * b)
		}
		for e := 0; e < 64; e++ {
			p, gr, s1, s2 := pick(s.bound.p), pick(g), pick(s.bound.s1), float32(math.Abs(float64(pick(s.bound.s2))))
			rules := o.Rules()
			p2, n1, n2 := kernelUpdate32(o, rules[rng.IntN(len(rules))], sc, p, gr, s1, s2)
			for _, x := range []float32{p2, n1, n2} {
				if !(float32(math.Abs(float64(x))) <= lim) {
					t.Fatalf("%s: p %g g %g s1 %g s2 %g → %g %g %g beyond the limit", what, p, gr, s1, s2, p2, n1, n2)
				}
			}
			// The bound after the step covers it too.
			nb, ok := s.next(s.bound, g, sc)
			if !ok || math.Abs(float64(p2)) > nb.p || math.Abs(float64(n1)) > nb.s1 || math.Abs(float64(n2)) > nb.s2 {
				t.Fatalf("%s: the next bound %+v misses %g %g %g", what, nb, p2, n1, n2)
			}
		}
	}
	if fast < 1000 {
		t.Fatalf("gsafe allowed the fast path in only %d of 4000 trials", fast)
	}
}

// TestGsafeOff: with a gradient sum (accumulation) the guard's largest
// gradient is not the update's, and every element is checked.
func TestGsafeOff(t *testing.T) {
	s := &Session{plan: &Plan{DType: F32, Optimizer: Optimizer{Kind: "adam", Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}}}
	s.bound = updateBound{on: true, p: 1}
	sc := s.plan.Optimizer.Scalars(1, 1e-3, 0)
	if g := s.gsafe(sc); g <= 0 {
		t.Fatalf("gsafe %g for a small model", g)
	}
	s.acc.inSum = true
	if g := s.gsafe(sc); g != -1 {
		t.Fatalf("gsafe %g with a gradient sum, want -1", g)
	}
	s.acc.inSum = false
	s.bound.p = math.MaxFloat32
	if g := s.gsafe(sc); g != -1 {
		t.Fatalf("gsafe %g with parameters at the limit, want -1", g)
	}
}
