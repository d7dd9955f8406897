package jit

import (
	"fmt"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestDropoutIndexBatchInner: dropout over a value whose batch axis is not
// outermost ([O, B, I]) keys element (o, b, j) by ((row0+b)·O + o)·I + j,
// the numbering that does not depend on the batch size (ops.sampleIndex).
// Two batch sizes must therefore agree on their common rows.
func TestDropoutIndexBatchInner(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const o, in, p, stream, seed = 3, 5, 0.4, 2, 77
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.D(o), ir.S("B"), ir.D(in))
	d := b.Op("dropout", ir.Attrs{F: p, I: stream}, x)
	w := b.Param("w", ir.F32, 1, 1, 1, in)
	m := b.Model("dropinner", b.Op("sum", ir.Attrs{}, b.Binary("mul", d, w)), d, ir.Optimizer{Kind: "sgd", LR: 0})
	for _, fuse := range []bool{true, false} {
		prog, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, prog, runtime.SessionOptions{MaxBatch: 7, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		s.SetTrain(true)
		for _, rows := range []int{7, 4} {
			ones := make([]float32, o*rows*in)
			for i := range ones {
				ones[i] = 1
			}
			if err := s.WriteInput("x", ones, rows); err != nil {
				t.Fatal(err)
			}
			if err := s.Run("predict", rows); err != nil {
				t.Fatal(err)
			}
			got := readNamed(t, s, "output", "output")
			want := make([]float64, len(got))
			for oo := 0; oo < o; oo++ {
				for r := 0; r < rows; r++ {
					for j := 0; j < in; j++ {
						if keep(seed, 1, stream, uint64((r*o+oo)*in+j), p) {
							want[(oo*rows+r)*in+j] = float64(float32(1 / (1 - p)))
						}
					}
				}
			}
			// Exact: ones times a constant, or zero.
			closeTo(t, fmt.Sprintf("fuse=%v rows %d", fuse, rows), got, want, 0, 0)
		}
		s.Close()
	}
}
