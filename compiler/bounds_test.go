package compiler

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/dsl"
)

// TestBoundsAtRefBatch: ngen build -batch 4611686018427387905 printed a
// planned peak of 8585984 bytes (the planner's products wrapped), and a
// negative -memory-budget was ignored. A size that fits a row but not the
// reference batch names the op.
func TestBoundsAtRefBatch(t *testing.T) {
	m := dsl.NewModel("wide")
	x := m.Input("x", dsl.F32, dsl.Batch, 32768, 32768)
	y := m.Labels("y", dsl.Batch)
	l := m.Linear("fc", dsl.Flatten(dsl.Scale(x, 1e-6)), 2)
	m.Output(l)
	m.Loss(dsl.CrossEntropy(l, y))
	m.Optimizer(dsl.SGD{LR: 0.1})
	im, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts Options
		want string
	}{
		{Options{RefBatch: 1 << 62}, "batch 4611686018427387904 exceeds the kernels' 32-bit range"},
		{Options{RefBatch: 1 << 20}, "input (compiler/bounds_test.go:16): f32[B,32768,32768] at batch 1048576 has a dimension outside"},
		{Options{MemoryBudget: -5}, "memory budget -5 bytes is negative"},
	} {
		if _, err := Compile(im, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.opts, err, c.want)
		}
	}
}
