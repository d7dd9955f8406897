package compiler

import (
	"math"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

func TestAutodiffMLP(t *testing.T) {
	p := through(t, testMLP(6, 5, 3, 0.2, adam), "autodiff", true)
	params := p.Step.Params()
	if len(params) != 4 || len(p.Step.Grads) != 4 {
		t.Fatalf("%d params, %d gradients", len(params), len(p.Step.Grads))
	}
	for _, prm := range params {
		g := p.Step.Grads[prm.Name]
		if g == nil || !g.Shape.Eq(prm.Shape) || g.DType != prm.DType {
			t.Errorf("gradient of %s: %v", prm.Name, g)
			continue
		}
		// Memory planning places each gradient in the grads vector, so it
		// must be a kernel's own result.
		if needsCopy(g, map[string]*ir.Value{}) {
			t.Errorf("gradient of %s is %s, not a computed value", prm.Name, g.LongString())
		}
		if base(g).Phase != "bwd" {
			t.Errorf("gradient of %s has phase %q", prm.Name, base(g).Phase)
		}
	}
	// A bias gradient reduces over the batch.
	if g := base(p.Step.Grads["fc1.bias"]); g.Op != "sum" || len(g.Args[0].Shape) != 2 || g.Args[0].Shape[0] != ir.S("B") {
		t.Errorf("fc1.bias gradient is %s, want a sum over the batch", g.LongString())
	}
	// Dropout's gradient redraws the same mask: the test MLP's one hidden
	// layer has a dropout forward and another backward, on the same stream.
	var drops []*ir.Value
	for _, v := range p.Step.Values {
		if v.Op == "dropout" {
			drops = append(drops, v)
		}
	}
	if len(drops) != 2 || drops[0].Attrs.String() != drops[1].Attrs.String() {
		t.Errorf("dropout ops after autodiff: %v, want 1 forward + 1 backward with the same attributes", drops)
	}
	// No gradient flows into the labels.
	for _, v := range p.Step.Values {
		if v.Op == "add" && v.Phase == "bwd" {
			for _, a := range v.Args {
				if a.DType == ir.I32 {
					t.Errorf("integer value in a gradient sum: %s", v.LongString())
				}
			}
		}
	}
}

// TestAutodiffSharedAndUnused: a parameter the loss does not reach still
// gets a gradient (zeros, in storage of its own), and a value used twice
// gets the sum of both uses' contributions.
func TestAutodiffSharedAndUnused(t *testing.T) {
	b := irtest.New()
	x := b.Param("x", ir.F32, 1, 3)
	b.Param("unused", ir.F32, 1, 2)
	// loss = sum(x·x): x is used twice, so its gradient sums two terms.
	loss := b.Op("sum", ir.Attrs{}, b.Binary("mul", x, x))
	p := through(t, b.Model("m", loss, x, ir.Optimizer{Kind: "sgd", LR: 0.1}), "autodiff", true)
	if g := p.Step.Grads["x"]; g == nil || g.Op != "add" {
		t.Errorf("gradient of a value used twice is %v, want the sum of both uses", g)
	}
	g := p.Step.Grads["unused"]
	if g == nil || !g.Shape.Eq(ir.Static(2)) {
		t.Fatalf("unused parameter's gradient: %v", g)
	}
	if g.Op != "copy" || g.Args[0].Op != "fill" || g.Args[0].Attrs.F != 0 {
		t.Errorf("unused parameter's gradient is %s, want a copy of a zero fill", g.LongString())
	}
}

// TestAutodiffShared: two parameters whose gradients are the same value
// (the two sides of an add) must not share storage.
func TestAutodiffShared(t *testing.T) {
	b := irtest.New()
	u := b.Param("u", ir.F32, 1, 2, 3)
	w := b.Param("w", ir.F32, 1, 2, 3)
	loss := b.Op("sum", ir.Attrs{}, b.Unary("relu", b.Binary("add", u, w)))
	p := through(t, b.Model("m", loss, nil, ir.Optimizer{Kind: "sgd", LR: 0.1}), "autodiff", true)
	gu, gw := p.Step.Grads["u"], p.Step.Grads["w"]
	if base(gu) == base(gw) {
		t.Errorf("u and w share gradient storage: %s", base(gu).LongString())
	}
}

// TestAutodiffNumeric evaluates the backward graph and compares it with the
// gradient worked out by hand, for a loss that broadcasts a bias over rows
// (its gradient reduces back) and uses both an intermediate and a
// parameter twice (their gradients accumulate):
//
//	h = x + b            x [2,3], b [3]
//	loss = sum(h·h) + sum(exp(x))
//	dx = 2h + exp(x)     db = Σ_rows 2h
func TestAutodiffNumeric(t *testing.T) {
	bd := irtest.New()
	x := bd.Param("x", ir.F32, 1, 2, 3)
	bias := bd.Param("b", ir.F32, 1, 3)
	h := bd.Binary("add", x, bias)
	loss := bd.Binary("add", bd.Op("sum", ir.Attrs{}, bd.Binary("mul", h, h)), bd.Op("sum", ir.Attrs{}, bd.Unary("exp", x)))
	m := bd.Model("m", loss, nil, ir.Optimizer{Kind: "sgd", LR: 0.1})
	xs := []float64{0.5, -1, 2, 0, 0.25, -0.75}
	bs := []float64{0.1, -0.2, 0.3}
	// Before and after folding, which must not change what is computed
	// (derive clones the forward function, so m serves both runs).
	for _, last := range []string{"autodiff", "fold constants"} {
		p := through(t, m, last, true)
		in := newInterp(nil)
		in.vals[p.Step.Lookup(ir.Param, "x")] = xs
		in.vals[p.Step.Lookup(ir.Param, "b")] = bs
		dx, db := in.eval(p.Step.Grads["x"]), in.eval(p.Step.Grads["b"])
		wantDB := make([]float64, 3)
		for i := range xs {
			hv := xs[i] + bs[i%3]
			want := 2*hv + math.Exp(xs[i])
			// float64 throughout; only the order of additions differs.
			if math.Abs(dx[i]-want) > 1e-12 {
				t.Errorf("after %s: dx[%d] = %g, want %g", last, i, dx[i], want)
			}
			wantDB[i%3] += 2 * hv
		}
		for i := range wantDB {
			if math.Abs(db[i]-wantDB[i]) > 1e-12 {
				t.Errorf("after %s: db[%d] = %g, want %g", last, i, db[i], wantDB[i])
			}
		}
	}
}
