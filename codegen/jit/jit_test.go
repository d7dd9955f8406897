package jit

import (
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

func TestMLPStep(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	p, err := compiler.Compile(irtest.MLP(ir.F32, 7, 9, 4, 0.2, irtest.Adam), compiler.Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 5, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, 5*7)
	y := make([]int32, 5)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range y {
		y[i] = int32(rng.IntN(4))
	}
	for step := 0; step < 50; step++ {
		if err := s.WriteInput("x", x, 5); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteInput("y", y, 5); err != nil {
			t.Fatal(err)
		}
		if err := s.Run("step", 5); err != nil {
			t.Fatal(err)
		}
		i, _ := s.Lookup("output", "loss")
		l, _ := s.ReadFloats(i)
		if step%10 == 0 {
			t.Logf("step %d loss %v", step, l)
		}
	}
}
