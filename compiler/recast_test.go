package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// bnStep is an f32 BatchNorm2d (statistics widened to f64) with a loss
// that reaches x, so the backward reads the widened d.
func bnStep() *ir.Model {
	b := irtest.New()
	x := b.Source("param", ir.Param, "x", ir.F32, ir.Static(4, 3, 5, 5), "const:0")
	gamma := b.Source("param", ir.Param, "bn.weight", ir.F32, ir.Static(3), "const:1")
	beta := b.Source("param", ir.Param, "bn.bias", ir.F32, ir.Static(3), "const:0")
	rm := b.Source("state", ir.State, "bn.running_mean", ir.F32, ir.Static(3), "const:0")
	rv := b.Source("state", ir.State, "bn.running_var", ir.F32, ir.Static(3), "const:1")
	y, nm, nv := ops.BatchNorm2d(b.Builder, x, gamma, beta, rm, rv, 0.1, 1e-5)
	b.F.Updates = append(b.F.Updates, ir.Update{State: rm, New: nm}, ir.Update{State: rv, New: nv})
	loss := b.Op("sum", ir.Attrs{}, b.Op("square", ir.Attrs{}, y))
	return b.Model("bn", loss, y, ir.Optimizer{Kind: "sgd", LR: 0.1})
}

// readsForwardWidening counts the backward values that read a widening
// cast computed by the forward pass.
func readsForwardWidening(f *ir.Func) int {
	n := 0
	for _, v := range f.Values {
		if v.Phase != "bwd" {
			continue
		}
		for _, a := range v.Args {
			if widening(a) && a.Phase == "" {
				n++
			}
		}
	}
	return n
}

// TestRecast: the backward of an f32 batch norm reads d widened to f64;
// after the pass it reads a clone of the cast of its own, placed just
// before it, and the fuser puts each clone in its reader's kernel, so no
// f64 value of x's size is stored.
func TestRecast(t *testing.T) {
	p := through(t, bnStep(), "recompute", true)
	if readsForwardWidening(p.Step) == 0 {
		t.Fatal("the test model's backward reads no widened forward value")
	}
	if err := recast(p); err != nil {
		t.Fatal(err)
	}
	if err := verify(p); err != nil {
		t.Fatal(err)
	}
	if n := readsForwardWidening(p.Step); n != 0 {
		t.Fatalf("%d backward reads of a forward widening left", n)
	}
	uses := p.Step.Uses()
	clones := 0
	for i, v := range p.Step.Values {
		if !isRecast(v) {
			continue
		}
		clones++
		if len(uses[v]) != 1 {
			t.Errorf("clone %s has %d readers, want 1", v.LongString(), len(uses[v]))
		}
		if next := p.Step.Values[i+1]; len(uses[v]) == 1 && uses[v][0] != next && !isRecast(next) {
			t.Errorf("clone %s is not placed just before its reader", v.LongString())
		}
	}
	if clones == 0 {
		t.Fatal("no clone")
	}

	q := through(t, bnStep(), "fuse", true)
	kernelOf := map[*ir.Value]int{}
	for gi, g := range q.Groups[q.Step] {
		for _, v := range g.Values {
			kernelOf[v] = gi
		}
	}
	uses = q.Step.Uses()
	for _, v := range q.Step.Values {
		if isRecast(v) && kernelOf[v] != kernelOf[uses[v][0]] {
			t.Errorf("clone %s is in kernel %d, its reader %s in %d: the wide value would be stored", v.LongString(), kernelOf[v], uses[v][0].LongString(), kernelOf[uses[v][0]])
		}
	}
	// No f64 value of x's size is read outside its kernel (without the
	// pass the backward read d widened by the forward's statistics pass).
	big := 0
	for _, v := range q.Step.Values {
		if v.DType == ir.F64 && v.Shape.Eq(ir.Static(4, 3, 5, 5)) {
			g := q.Groups[q.Step][kernelOf[v]]
			for _, u := range uses[v] {
				if kernelOf[u] != kernelOf[v] && g != nil {
					big++
					t.Logf("%s (kernel %d) read by %s (kernel %d)", v.LongString(), kernelOf[v], u.LongString(), kernelOf[u])
				}
			}
		}
	}
	if big != 0 {
		t.Errorf("%d reads of an f64 [N,C,H,W] value cross kernels", big)
	}
}
