package codegen

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
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
