package codegen

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// TestLoopRowLen checks which row length an elementwise kernel iterates
// and how each broadcast input is indexed in rows: a row-invariant part
// plus the column when the input varies along the row.
func TestLoopRowLen(t *testing.T) {
	B := ir.S("B")
	space := ir.Shape{B, ir.D(4), ir.D(3), ir.D(10)}
	f := ir.NewFunc("f")
	in := func(s ir.Shape) *ir.Value {
		v := f.NewValue("input", ir.F32, s, ir.Pos{})
		v.Role = ir.Input
		return v
	}
	for _, tc := range []struct {
		name   string
		inputs []ir.Shape
		rl     int
		index  []string // per input, in row mode
	}{
		// Whole inputs need no index arithmetic: a flat loop.
		{"whole", []ir.Shape{space}, 0, nil},
		// A per-channel input is constant over H·W = 30.
		{"per-channel", []ir.Shape{space, ir.Static(4, 1, 1)}, 30, []string{"(r) * 30LL + j", "(long long)((((unsigned long long)(r)) % 4LL))"}},
		// A per-column input varies along W only: rows of W = 10 (H·W
		// would mix constant and varying axes).
		{"per-column", []ir.Shape{space, ir.Static(10)}, 10, []string{"(r) * 10LL + j", "(0) * 10LL + j"}},
		// A per-row input [3, 1] is constant along W.
		{"per-row", []ir.Shape{ir.Static(3, 1)}, 10, []string{"(long long)((((unsigned long long)(r)) % 3LL))"}},
	} {
		g := &compiler.Group{Kind: compiler.EW, Space: space}
		for _, s := range tc.inputs {
			g.Inputs = append(g.Inputs, in(s))
		}
		k := &kernel{byName: map[string]int{}}
		rl := k.loopRowLen(g)
		if rl != tc.rl {
			t.Errorf("%s: row length %d, want %d", tc.name, rl, tc.rl)
			continue
		}
		for i, want := range tc.index {
			got, ok := k.rowIndex(space, tc.inputs[i], rl)
			if !ok || got != want {
				t.Errorf("%s: input %s indexed %q (%v), want %q", tc.name, tc.inputs[i], got, ok, want)
			}
		}
	}
	// No static suffix matches a row length that is not a product of
	// trailing dimensions (im2col's rows of OW inside L = OH·OW).
	k := &kernel{byName: map[string]int{}}
	if got, ok := k.rowIndex(ir.Shape{B, ir.D(9), ir.D(12)}, ir.Static(9, 1), 4); ok {
		t.Errorf("rows of 4 in [B,9,12]: indexed %q, want the flat fallback", got)
	}
}

// TestEarlyStores checks where an elementwise kernel stores its outputs:
// each right after the statement defining it, but never before the body's
// last load, which in an in-place update may read the storage the store
// writes. Here out0 (v2 = exp(x)) waits for the load of y that v3 needs,
// and out1 follows v3's definition.
func TestEarlyStores(t *testing.T) {
	f := ir.NewFunc("f")
	space := ir.Static(8)
	x := f.NewValue("input", ir.F32, space, ir.Pos{})
	y := f.NewValue("input", ir.F32, space, ir.Pos{})
	x.Role, y.Role = ir.Input, ir.Input
	ex := f.NewValue("exp", ir.F32, space, ir.Pos{}, x)
	prod := f.NewValue("mul", ir.F32, space, ir.Pos{}, ex, y)
	g := &compiler.Group{Kind: compiler.EW, Space: space, Root: prod, Name: "t", Kernel: "t",
		Values: []*ir.Value{ex, prod}, Inputs: []*ir.Value{x, y}, Outputs: []*ir.Value{ex, prod}}
	p := &compiler.Program{
		Plan:  &runtime.Plan{Buffers: make([]runtime.Buffer, 4)},
		BufOf: map[*ir.Value]int{x: 0, y: 1, ex: 2, prod: 3},
	}
	k := elementwiseKernel(p, g, ops.CUDA)
	want := `  const long long n = 8LL;
  NGEN_GRID_STRIDE(i, n) {
    float a0 = in0[i];
    float v2 = expf(a0);
    float a1 = in1[i];
    out0[i] = v2;
    float v3 = (v2 * a1);
    out1[i] = v3;
  }
`
	if got := k.body.String(); got != want {
		t.Errorf("body:\n%s\nwant:\n%s", got, want)
	}
}
