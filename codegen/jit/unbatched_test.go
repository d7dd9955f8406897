package jit

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestUnbatchedModelTrains (issue 27): the unbatched e_ce_scalar, whose
// gradient has the flat parameter vector's shape, failed to compile
// fused ("temporary step.v2 is alive across the gradient/update
// boundary"); it trains again, fused and unfused, to the same weights.
func TestUnbatchedModelTrains(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.D(3))
	y := b.Input("y", ir.I32)
	w := b.Param("w", ir.F32, 1, 3)
	logits := b.Binary("mul", b.Op("scale", ir.Attrs{F: 1}, x), w)
	m := b.Model("e_ce_scalar", b.Binary("cross_entropy", logits, y), logits, ir.Optimizer{Kind: "adam", LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	var ws [][]float64
	for _, fuse := range []bool{true, false} {
		p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatalf("fuse=%v: %v", fuse, err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 1, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		var first, last float64
		for i := 0; i < 50; i++ {
			if err := s.WriteInput("x", []float32{0.5, -1, 2}, 1); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteInput("y", []int32{1}, 1); err != nil {
				t.Fatal(err)
			}
			if err := s.Run("step", 1); err != nil {
				t.Fatalf("fuse=%v step %d: %v", fuse, i, err)
			}
			l, _ := s.StepLoss()
			if i == 0 {
				first = l
			}
			last = l
		}
		if !(last < first) || s.Steps() != 50 {
			t.Fatalf("fuse=%v: loss %v → %v over %d steps", fuse, first, last, s.Steps())
		}
		wi, _ := s.Lookup("param", "w")
		v, err := s.ReadFloats(wi)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, v)
		s.Close()
	}
	for i := range ws[0] {
		// The same arithmetic per element, fused or not.
		if ws[0][i] != ws[1][i] {
			t.Fatalf("w fused %v, unfused %v", ws[0], ws[1])
		}
	}
}
