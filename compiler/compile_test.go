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
