package compiler

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// TestInferShapesRules declares values the way the DSL does, with the type
// the user's code implies, and checks inference accepts exactly the ones
// the op's rule agrees with. A rejection must point at the user's line and
// show both shapes, since that is all the user has to go on.
func TestInferShapesRules(t *testing.T) {
	B, d := ir.S("B"), ir.D
	pos := ir.Pos{File: "models/x/model.go", Line: 42}
	for _, tc := range []struct {
		name string
		// decl appends the value under test (and its sources) to f.
		decl func(f *ir.Func) *ir.Value
		want []string // substrings of the error; nil means accepted
	}{
		{"broadcast both ways with the batch dim", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(1), d(3))
			p := src(f, "param", ir.F32, d(4), d(1))
			return f.NewValue("add", ir.F32, ir.Shape{B, d(4), d(3)}, pos, x, p)
		}, nil},
		{"bias over the batch", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(3))
			p := src(f, "param", ir.F32, d(3))
			return f.NewValue("mul", ir.F32, ir.Shape{B, d(3)}, pos, x, p)
		}, nil},
		{"broadcast mismatch", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(3))
			p := src(f, "param", ir.F32, d(4))
			return f.NewValue("add", ir.F32, ir.Shape{B, d(3)}, pos, x, p)
		}, []string{"models/x/model.go:42", "add", "[B,3]", "[4]"}},
		{"the batch dim does not broadcast against a constant", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(3))
			p := src(f, "param", ir.F32, d(8), d(3))
			return f.NewValue("add", ir.F32, ir.Shape{B, d(3)}, pos, x, p)
		}, []string{"models/x/model.go:42", "[B,3]", "[8,3]"}},
		{"declared shape disagrees with the rule", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(3))
			return f.NewValue("relu", ir.F32, ir.Shape{B, d(4)}, pos, x)
		}, []string{"models/x/model.go:42", "relu", "f32[B,4]", "f32[B,3]"}},
		{"dtype mismatch", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(3))
			p := src(f, "param", ir.F64, d(3))
			return f.NewValue("add", ir.F32, ir.Shape{B, d(3)}, pos, x, p)
		}, []string{"models/x/model.go:42", "f32[B,3]", "f64[3]"}},
		{"integer labels are not differentiable floats", func(f *ir.Func) *ir.Value {
			y := src(f, "input", ir.I32, B)
			return f.NewValue("exp", ir.I32, ir.Shape{B}, pos, y)
		}, []string{"models/x/model.go:42", "i32[B]"}},
		{"sum over the batch keeps the feature dim", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(3))
			v := f.NewValue("sum", ir.F32, ir.Shape{d(1), d(3)}, pos, x)
			v.Attrs = ir.Attrs{Axes: []int{0}, KeepDim: true}
			return v
		}, nil},
		{"mean over everything is a scalar", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(3))
			return f.NewValue("mean", ir.F32, ir.Shape{}, pos, x)
		}, nil},
		{"matmul keeps the batch dim", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(6))
			w := src(f, "param", ir.F32, d(5), d(6))
			v := f.NewValue("matmul", ir.F32, ir.Shape{B, d(5)}, pos, x, w)
			v.Attrs.TransB = true
			return v
		}, nil},
		{"matmul inner dims differ", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(5))
			w := src(f, "param", ir.F32, d(5), d(6))
			v := f.NewValue("matmul", ir.F32, ir.Shape{B, d(5)}, pos, x, w)
			v.Attrs.TransB = true
			return v
		}, []string{"models/x/model.go:42", "matmul", "[B,5]", "[5,6]"}},
		{"reshape keeps the symbolic size", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(6))
			v := f.NewValue("reshape", ir.F32, ir.Shape{B, d(2), d(3)}, pos, x)
			v.Attrs.Shape = ir.Shape{B, d(2), d(3)}
			return v
		}, nil},
		{"reshape cannot drop the batch dim", func(f *ir.Func) *ir.Value {
			x := src(f, "input", ir.F32, B, d(6))
			v := f.NewValue("reshape", ir.F32, ir.Static(6), pos, x)
			v.Attrs.Shape = ir.Static(6)
			return v
		}, []string{"models/x/model.go:42", "[B,6]", "[6]"}},
	} {
		f := ir.NewFunc("forward")
		tc.decl(f)
		err := inferFunc(f)
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: rejected: %v", tc.name, err)
		case tc.want != nil && err == nil:
			t.Errorf("%s: accepted\n%s", tc.name, f.Print())
		case err != nil:
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: error %q lacks %q", tc.name, err, w)
				}
			}
		}
	}
}

// src declares a source value with a name, as the DSL does.
func src(f *ir.Func, op string, dt ir.DType, shape ...ir.Dim) *ir.Value {
	v := f.NewValue(op, dt, ir.Shape(shape), ir.Pos{File: "models/x/model.go", Line: 1})
	v.Role = map[string]ir.Role{"input": ir.Input, "param": ir.Param}[op]
	v.Name = op
	return v
}

// TestInferShapesMLP runs the pass over a whole model, then corrupts it the
// way a bad declaration would.
func TestInferShapesMLP(t *testing.T) {
	m := testMLP(6, 5, 3, 0, adam)
	through(t, m, "infer shapes", true)
	for _, v := range m.Forward.Values {
		if v.Op == "matmul" && (len(v.Shape) != 2 || v.Shape[0] != ir.S("B")) {
			t.Errorf("%s: want a [B, n] result", v.LongString())
		}
	}
	// The second layer's matmul now multiplies by the first layer's weight.
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
	err := inferShapes(&Program{Model: m})
	if err == nil {
		t.Fatal("a shape mismatch passed inference")
	}
	for _, want := range []string{"models/x/model.go:42", "matmul", "[B,5]", "[5,6]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestInferShapesModel checks what the pass asks of the model as a whole.
func TestInferShapesModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(m *ir.Model)
		want   string
	}{
		{"no loss", func(m *ir.Model) { m.Loss = nil }, "no loss declared"},
		{"loss not a scalar", func(m *ir.Model) { m.Loss = m.Output }, "loss must be a scalar, got f32[B,3]"},
		{"no optimizer", func(m *ir.Model) { m.Optimizer = nil }, "no optimizer declared"},
	} {
		m := testMLP(6, 5, 3, 0, adam)
		tc.break_(m)
		err := inferShapes(&Program{Model: m})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}
