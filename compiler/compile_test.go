package compiler

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

var adam = irtest.Adam

func testMLP(in, hidden, classes int, dropout float64, opt ir.Optimizer) *ir.Model {
	return irtest.MLP(ir.F32, in, hidden, classes, dropout, opt)
}

func TestCompileDumpAll(t *testing.T) {
	var buf bytes.Buffer
	p, err := Compile(testMLP(6, 5, 3, 0.2, adam), Options{Fuse: true, Dump: "all", DumpTo: &buf})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range PassNames() {
		if !strings.Contains(buf.String(), "# after "+strings.ReplaceAll(name, "_", " ")) {
			t.Errorf("dump lacks pass %s", name)
		}
	}
	t.Log(buf.String())
	if p.Plan == nil || p.PeakBytes <= 0 {
		t.Fatalf("no plan or peak: %+v", p.PeakBytes)
	}
}

func TestCompileBadDump(t *testing.T) {
	_, err := Compile(testMLP(6, 5, 3, 0, adam), Options{Dump: "nonsense", DumpTo: &bytes.Buffer{}})
	if err == nil || !strings.Contains(err.Error(), "no such pass") {
		t.Fatalf("err = %v", err)
	}
}

// TestPassOrder: the table is in the order the passes need, and the check
// at init would catch a reordering or a renamed pass.
func TestPassOrder(t *testing.T) {
	want := "infer_shapes pool_first residual_norm project_embedding expand_fused_ops autocast derive_functions autodiff lower_optimizer fold_constants prune recompute recast f32_weight_grads fold_norm_casts fold_sum_casts fuse plan_memory"
	if got := strings.Join(PassNames(), " "); got != want {
		t.Errorf("passes %s, want %s", got, want)
	}
	if err := checkOrder(passes, passOrder); err != nil {
		t.Fatal(err)
	}
	swapped := append([]pass(nil), passes...)
	swapped[7], swapped[8] = swapped[8], swapped[7] // lower optimizer before autodiff
	if err := checkOrder(swapped, passOrder); err == nil || !strings.Contains(err.Error(), `"autodiff" must run before "lower optimizer"`) {
		t.Errorf("swapped passes: %v", err)
	}
	if err := checkOrder(passes[1:], passOrder); err == nil || !strings.Contains(err.Error(), "infer shapes") {
		t.Errorf("missing pass: %v", err)
	}
}

// TestCompileDumpOne: a prefix dumps after the one pass it names.
func TestCompileDumpOne(t *testing.T) {
	var buf bytes.Buffer
	if _, err := Compile(testMLP(6, 5, 3, 0, adam), Options{Fuse: true, Dump: "fuse", DumpTo: &buf}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Count(out, "# after ") != 1 || !strings.HasPrefix(out, "# after fuse\n") || !strings.Contains(out, "kernel 0 ") {
		t.Errorf("dump=fuse printed:\n%s", out)
	}
}

// TestCompileErrorNamesPass: an invalid IR after a pass is reported with
// the pass's name, so a broken pass is found at once.
func TestCompileErrorNamesPass(t *testing.T) {
	saved := passes
	defer func() { passes = saved }()
	n := 0
	for n < len(saved) && saved[n].name != "autodiff" {
		n++
	}
	passes = append([]pass(nil), passes[:n+1]...) // through autodiff
	passes = append(passes, pass{name: "break shapes", required: true, fn: func(p *Program) error {
		p.Step.Values[len(p.Step.Values)-1].Shape = ir.Static(7)
		return nil
	}})
	_, err := Compile(testMLP(6, 5, 3, 0, adam), Options{})
	if err == nil || !strings.Contains(err.Error(), `after pass "break shapes"`) {
		t.Errorf("err = %v", err)
	}
}

// through runs the passes up to and including last, verifying after each,
// as Compile does.
func through(t *testing.T, m *ir.Model, last string, fuse bool) *Program {
	t.Helper()
	p := &Program{Model: m, Fuse: fuse, RefBatch: 8, Groups: map[*ir.Func][]*Group{}}
	for _, ps := range passes {
		if err := ps.fn(p); err != nil {
			t.Fatalf("pass %s: %v", ps.name, err)
		}
		if err := verify(p); err != nil {
			t.Fatalf("after %s: %v", ps.name, err)
		}
		if ps.name == last {
			return p
		}
	}
	t.Fatalf("no pass %q", last)
	return nil
}

// count returns how many values of f have op.
func count(f *ir.Func, op string) int {
	n := 0
	for _, v := range f.Values {
		if v.Op == op {
			n++
		}
	}
	return n
}
