package compiler

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

func TestInferShapes(t *testing.T) {
	m := testMLP(6, 5, 3, 0, adam)
	through(t, m, "infer shapes", true)
	for _, v := range m.Forward.Values {
		if v.Op == "matmul" && (len(v.Shape) != 2 || v.Shape[0].Sym != "B") {
			t.Errorf("%s: want a [B, n] result", v.LongString())
		}
	}
	// Corrupt the IR the way a bad declaration would: the second layer's
	// matmul now multiplies by the first layer's weight.
	m = testMLP(6, 5, 3, 0, adam)
	var ws []*ir.Value
	for _, v := range m.Forward.Values {
		if v.Role == ir.Param && strings.HasSuffix(v.Name, "weight") {
			ws = append(ws, v)
		}
	}
	for _, v := range m.Forward.Values {
		if v.Op == "matmul" && v.Args[1] == ws[1] {
			v.Args[1] = ws[0]
			v.Pos = ir.Pos{File: "models/x/model.go", Line: 42}
		}
	}
	p := &Program{Model: m, Groups: map[*ir.Func][]*Group{}}
	err := inferShapes(p)
	if err == nil {
		t.Fatal("a shape mismatch passed inference")
	}
	for _, want := range []string{"models/x/model.go:42", "matmul", "[B,5]", "[5,6]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
