package compiler

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

var optimizers = []ir.Optimizer{
	{Kind: "sgd", LR: 0.1},
	{Kind: "sgd", LR: 0.1, Momentum: 0.9, Dampening: 0.3},
	{Kind: "sgd", LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-2},
	adam,
	{Kind: "adam", LR: 1e-2, Beta1: 0.8, Beta2: 0.9, Eps: 1e-3, WeightDecay: 0.1},
	{Kind: "adamw", LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01},
}

func TestLowerOptimizerStructure(t *testing.T) {
	for _, o := range optimizers {
		state := 0 // plain SGD keeps none
		switch {
		case o.Kind != "sgd":
			state = 2 // exp_avg, exp_avg_sq
		case o.Momentum != 0:
			state = 1 // momentum_buffer
		}
		p := through(t, testMLP(6, 5, 3, 0, o), "lower optimizer", true)
		f := p.Step
		nstate := 0
		for _, v := range f.Values {
			if v.Role == ir.State {
				nstate++
				if !v.Shape.Eq(ir.Static(53)) { // 5·6+5 + 3·5+3 parameters
					t.Errorf("%+v: state %s is not the flat parameter vector", o, v.LongString())
				}
			}
		}
		if nstate != state {
			t.Errorf("%+v: %d state buffers, want %d", o, nstate, state)
		}
		// Every state buffer and the flat parameter vector are written back.
		if len(f.Updates) != state+1 {
			t.Errorf("%+v: %d updates, want %d", o, len(f.Updates), state+1)
		}
		params := 0
		for _, u := range f.Updates {
			if !u.State.Shape.Eq(u.New.Shape) || u.New.Phase != "opt" {
				t.Errorf("%+v: update %s <- %s", o, u.State.LongString(), u.New.LongString())
			}
			if u.State.Op == "flat" && u.State.Args[0].Role == ir.Param {
				params++
			}
		}
		if params != 1 {
			t.Errorf("%+v: %d updates of the flat parameters, want 1", o, params)
		}
	}
}

func TestLowerOptimizerErrors(t *testing.T) {
	m := testMLP(6, 5, 3, 0, ir.Optimizer{Kind: "lion", LR: 1e-3})
	if err := lowerOptimizer(through(t, m, "autodiff", true)); err == nil || !strings.Contains(err.Error(), `unknown optimizer "lion"`) {
		t.Errorf("unknown optimizer: err = %v", err)
	}
	// The update runs over one flat vector, so it needs one dtype.
	b := irtest.New()
	x := b.Param("x", ir.F32, 1, 3)
	b.Param("y", ir.F64, 1, 3)
	p := &Program{Model: b.Model("m", b.Op("sum", ir.Attrs{}, x), nil, adam), Step: b.F}
	if err := lowerOptimizer(p); err == nil || !strings.Contains(err.Error(), "share one dtype") {
		t.Errorf("mixed parameter dtypes: err = %v", err)
	}
}

// TestLowerOptimizerNumeric runs the lowered update for three steps with an
// interpreter and compares with PyTorch's algorithms as torch.optim's docs
// state them, written out below independently of the lowering. Three steps
// cover the first step's special cases (SGD's momentum buffer starts at the
// gradient; Adam's bias corrections) and state carried between steps.
// The loss is sum(w·w) + sum(b·b), so each step's gradient is 2p and comes
// from the backward graph, not from the test.
func TestLowerOptimizerNumeric(t *testing.T) {
	for _, o := range optimizers {
		bd := irtest.New()
		w := bd.Param("w", ir.F32, 1, 2, 3)
		bias := bd.Param("b", ir.F32, 1, 3)
		sq := func(v *ir.Value) *ir.Value { return bd.Op("sum", ir.Attrs{}, bd.Binary("mul", v, v)) }
		m := bd.Model("m", bd.Binary("add", sq(w), sq(bias)), nil, o)
		f := through(t, m, "fold constants", true).Step

		start := []float64{0.5, -1, 2, 0, 0.25, -0.75, 0.1, -0.2, 0.3}
		got := append([]float64(nil), start...)
		state := map[*ir.Value][]float64{}
		ref := torchOptimizer{o: o, p: append([]float64(nil), start...)}
		for step := 1; step <= 3; step++ {
			in := newInterp(nil)
			in.vals[f.Lookup(ir.Param, "w")] = got[:6]
			in.vals[f.Lookup(ir.Param, "b")] = got[6:]
			scal := planOptimizer(&o, nil).Scalars(step, o.LR, o.WeightDecay)
			for _, v := range f.Values {
				switch v.Role {
				case ir.Scalar:
					s, ok := scal[v.Name]
					if !ok {
						t.Fatalf("%+v: the runtime computes no scalar %q", o, v.Name)
					}
					in.vals[v] = []float64{s}
				case ir.State:
					if state[v] == nil {
						state[v] = make([]float64, len(start)) // optimizer state starts at zero
					}
					in.vals[v] = state[v]
				}
			}
			// Updates apply after the function runs: evaluate all first.
			news := make([][]float64, len(f.Updates))
			for i, u := range f.Updates {
				news[i] = in.eval(u.New)
			}
			for i, u := range f.Updates {
				if u.State.Op == "flat" {
					got = news[i]
				} else {
					state[u.State] = news[i]
				}
			}
			g := make([]float64, len(ref.p))
			for i, x := range ref.p {
				g[i] = 2 * x
			}
			ref.step(g)
			for i := range got {
				// float64 throughout; the lowering may associate
				// differently from the reference: rtol 1e-12.
				if math.Abs(got[i]-ref.p[i]) > 1e-12*math.Max(1, math.Abs(ref.p[i])) {
					t.Errorf("%+v step %d: params %v, want %v", o, step, fmtVec(got), fmtVec(ref.p))
					break
				}
			}
		}
	}
}

func fmtVec(v []float64) string {
	var parts []string
	for _, x := range v {
		parts = append(parts, fmt.Sprintf("%.9g", x))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// torchOptimizer is torch.optim.SGD, Adam and AdamW as their documentation
// gives the algorithms (maximize=False, amsgrad=False).
type torchOptimizer struct {
	o       ir.Optimizer
	t       int
	p       []float64
	m, v, b []float64
}

func (r *torchOptimizer) step(grad []float64) {
	o := r.o
	r.t++
	n := len(r.p)
	if r.m == nil {
		r.m, r.v, r.b = make([]float64, n), make([]float64, n), make([]float64, n)
	}
	for i := range r.p {
		g := grad[i]
		switch o.Kind {
		case "sgd":
			if o.WeightDecay != 0 {
				g += o.WeightDecay * r.p[i]
			}
			if o.Momentum != 0 {
				if r.t == 1 {
					r.b[i] = g
				} else {
					r.b[i] = o.Momentum*r.b[i] + (1-o.Dampening)*g
				}
				if o.Nesterov {
					g += o.Momentum * r.b[i]
				} else {
					g = r.b[i]
				}
			}
			r.p[i] -= o.LR * g
		case "adam", "adamw":
			if o.Kind == "adamw" {
				r.p[i] *= 1 - o.LR*o.WeightDecay
			} else if o.WeightDecay != 0 {
				g += o.WeightDecay * r.p[i]
			}
			r.m[i] = o.Beta1*r.m[i] + (1-o.Beta1)*g
			r.v[i] = o.Beta2*r.v[i] + (1-o.Beta2)*g*g
			mhat := r.m[i] / (1 - math.Pow(o.Beta1, float64(r.t)))
			vhat := r.v[i] / (1 - math.Pow(o.Beta2, float64(r.t)))
			r.p[i] -= o.LR * mhat / (math.Sqrt(vhat) + o.Eps)
		}
	}
}

// TestUnreachedParamsNotUpdated: a parameter no gradient of the loss
// reaches (here fc3, read only by the output) gets no update at all, as
// PyTorch's optimizers skip a parameter whose .grad is None: no weight
// decay moves it and its state stays as it was (fuzz_553_nograd checks
// the values against PyTorch). It is laid out after the reached ones, so
// the update is still one contiguous slice, and a loss that reaches no
// parameter is an error at the loss.
func TestUnreachedParamsNotUpdated(t *testing.T) {
	for _, o := range optimizers {
		b := irtest.New()
		x := b.Input("x", ir.F32, ir.S("B"), ir.D(6))
		y := b.Input("y", ir.I32, ir.S("B"))
		side := b.Linear("fc3", x, 4)
		logits := b.Linear("fc2", x, 3)
		m := b.Model("unreached", b.Binary("cross_entropy", logits, y), side, o)
		p := through(t, m, "plan memory", true)
		f := p.Step
		if !f.Unreached["fc3.weight"] || !f.Unreached["fc3.bias"] || f.Unreached["fc2.weight"] || len(f.Unreached) != 2 {
			t.Fatalf("%+v: Unreached = %v", o, f.Unreached)
		}
		for _, u := range f.Updates {
			if u.State.Op == "flat" {
				for _, a := range u.State.Args {
					if f.Unreached[a.Name] {
						t.Errorf("%+v: the update writes %s", o, a.Name)
					}
				}
			}
			if u.State.Role == ir.State && !u.State.Shape.Eq(ir.Static(3*6+3)) {
				// a segment of the state vector: only fc2's 21 elements
				t.Errorf("%+v: state update %s", o, u.State.LongString())
			}
		}
		off := map[string]int64{}
		for _, buf := range p.Plan.Buffers {
			if buf.Role == "param" {
				off[buf.Name] = buf.Offset
			}
		}
		if off["fc3.weight"] < off["fc2.bias"] || off["fc3.bias"] < off["fc2.bias"] {
			t.Errorf("%+v: the unreached parameters are not laid out last: %v", o, off)
		}
	}

	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(6))
	side := b.Linear("fc3", x, 4)
	m := b.Model("no_param_loss", b.Op("sum", ir.Attrs{}, x), side, adam)
	_, err := Compile(m, Options{Fuse: true})
	if err == nil || !strings.Contains(err.Error(), "the loss depends on no parameter") {
		t.Fatalf("a loss of the input alone: err = %v", err)
	}
}
