package ops

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

func newBuilder() *Builder {
	return &Builder{F: ir.NewFunc("f"), Pos: ir.Pos{File: "model.go", Line: 7}}
}

func param(b *Builder, dt ir.DType, shape ir.Shape) *ir.Value {
	v := b.F.NewValue("param", dt, shape, b.Pos)
	v.Role = ir.Param
	return v
}

// TestVisionShapes checks the shape rules against torch's output sizes
// (floor division, dilation, padding) on odd shapes.
func TestVisionShapes(t *testing.T) {
	for _, tc := range []struct {
		name string
		x, w ir.Shape
		win  Window
		want string
	}{
		{"plain", ir.Shape{ir.S("B"), ir.D(3), ir.D(7), ir.D(5)}, ir.Static(4, 3, 3, 3), Window{3, 3, 1, 1, 0, 0, 1, 1, 1}, "[B,4,5,3]"},
		{"stride2 pad2", ir.Static(2, 2, 7, 6), ir.Static(3, 2, 3, 3), Window{3, 3, 2, 2, 2, 2, 1, 1, 1}, "[2,3,5,4]"},
		{"dilation2", ir.Static(1, 2, 8, 7), ir.Static(2, 2, 3, 3), Window{3, 3, 1, 1, 1, 1, 2, 2, 1}, "[1,2,6,5]"},
		{"groups2 3x2 kernel", ir.Static(2, 4, 5, 6), ir.Static(6, 2, 3, 2), Window{3, 2, 1, 1, 1, 0, 1, 1, 2}, "[2,6,5,5]"},
	} {
		b := newBuilder()
		y := Conv2d(b, param(b, ir.F32, tc.x), param(b, ir.F32, tc.w), param(b, ir.F32, ir.Static(tc.w[0].N)), tc.win)
		if b.Err != nil || y.Shape.String() != tc.want {
			t.Errorf("conv %s: %s, %v; want %s", tc.name, y.Shape, b.Err, tc.want)
		}
	}
	b := newBuilder()
	x := param(b, ir.F64, ir.Static(1, 2, 7, 5))
	if y := MaxPool2d(b, x, Window{3, 3, 2, 2, 1, 1, 1, 1, 1}); b.Err != nil || y.Type() != "f64[1,2,4,3]" || y.Args[1].Type() != "i32[1,2,4,3]" {
		t.Errorf("maxpool: %s (argmax %s), %v", y.Type(), y.Args[1].Type(), b.Err)
	}
	if y := b.Op("avgpool", ir.Attrs{Ints: Window{5, 5, 2, 2, 2, 2, 1, 1, 1}.Ints()}, x); b.Err != nil || y.Type() != "f64[1,2,4,3]" {
		t.Errorf("avgpool: %s, %v", y.Type(), b.Err)
	}
}

// TestVisionErrors checks that bad operands give an error naming the op
// the user wrote and its position, not the primitives it lowers to.
func TestVisionErrors(t *testing.T) {
	x := ir.Static(2, 4, 6, 6)
	for _, tc := range []struct {
		name string
		w, b ir.Shape
		win  Window
		want string
	}{
		{"channel mismatch", ir.Static(3, 3, 3, 3), ir.Static(3), Window{3, 3, 1, 1, 0, 0, 1, 1, 1}, "conv2d (model.go:7): weight [3,3,3,3] does not fit input [2,4,6,6]"},
		{"kernel mismatch", ir.Static(3, 4, 3, 3), nil, Window{2, 2, 1, 1, 0, 0, 1, 1, 1}, "conv2d (model.go:7): weight [3,4,3,3] does not fit"},
		{"groups mismatch", ir.Static(4, 4, 3, 3), nil, Window{3, 3, 1, 1, 0, 0, 1, 1, 2}, "want [4,2,3,3]"},
		{"cout not divisible", ir.Static(3, 2, 3, 3), nil, Window{3, 3, 1, 1, 0, 0, 1, 1, 2}, "Cout divisible by groups 2"},
		{"bias mismatch", ir.Static(3, 4, 3, 3), ir.Static(4), Window{3, 3, 1, 1, 0, 0, 1, 1, 1}, "conv2d (model.go:7): bias [4], want [3]"},
		{"kernel larger than padded input", ir.Static(3, 4, 9, 9), nil, Window{9, 9, 1, 1, 1, 1, 1, 1, 1}, "conv2d (model.go:7): conv2d: window 9x9 (dilation 1x1) does not fit the 6x6 input padded by 1x1"},
		{"dilated kernel too large", ir.Static(3, 4, 3, 3), nil, Window{3, 3, 1, 1, 0, 0, 3, 3, 1}, "does not fit"},
		{"channels not divisible", ir.Static(3, 1, 3, 3), nil, Window{3, 3, 1, 1, 0, 0, 1, 1, 3}, "4 channels do not split into 3 groups"},
	} {
		b := newBuilder()
		var bias *ir.Value
		if tc.b != nil {
			bias = param(b, ir.F32, tc.b)
		}
		Conv2d(b, param(b, ir.F32, x), param(b, ir.F32, tc.w), bias, tc.win)
		if b.Err == nil || !strings.Contains(b.Err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.name, b.Err, tc.want)
		}
	}
	for _, tc := range []struct {
		op   string
		win  Window
		want string
	}{
		{"avgpool", Window{3, 3, 1, 1, 0, 0, 2, 2, 1}, "avgpool has no dilation"},
		{"avgpool", Window{2, 2, 2, 2, 2, 2, 1, 1, 1}, "at most half the kernel"},
		// Stride 7: the span -1 must not truncate to one output.
		{"maxpool_argmax", Window{7, 7, 7, 7, 0, 0, 1, 1, 1}, "does not fit the 6x6 input"},
		{"maxpool_argmax", Window{2, 2, 2, 2, 0, 0, 1, 1, 2}, "has no groups"},
	} {
		b := newBuilder()
		b.Op(tc.op, ir.Attrs{Ints: tc.win.Ints()}, param(b, ir.F32, x))
		if b.Err == nil || !strings.Contains(b.Err.Error(), tc.want) || !strings.Contains(b.Err.Error(), "(model.go:7)") {
			t.Errorf("%s %v: err = %v, want %q", tc.op, tc.win, b.Err, tc.want)
		}
	}
	// On 2 rows, the window rows -1 and 2 are both padding: torch would
	// return -inf with no index.
	b := newBuilder()
	MaxPool2d(b, param(b, ir.F32, ir.Static(1, 1, 2, 5)), Window{2, 1, 1, 1, 1, 0, 3, 1, 1})
	if want := "maxpool2d (model.go:7): maxpool2d: a window 2x1 (dilation 3x1) lies wholly in the padding"; b.Err == nil || !strings.Contains(b.Err.Error(), want) {
		t.Errorf("all-padding window: err = %v, want %q", b.Err, want)
	}
	b = newBuilder()
	MaxPool2d(b, param(b, ir.F32, ir.Static(2, 4)), Window{2, 2, 2, 2, 0, 0, 1, 1, 1})
	if want := "maxpool2d (model.go:7): maxpool2d needs an N×C×H×W input"; b.Err == nil || !strings.Contains(b.Err.Error(), want) {
		t.Errorf("maxpool2d of a matrix: err = %v, want %q", b.Err, want)
	}
}
