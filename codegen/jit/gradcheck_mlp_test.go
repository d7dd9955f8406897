package jit

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestGradcheckMLP compares every parameter gradient of an f64 MLP
// (matmul, bias add, relu, cross-entropy, and the sum reductions of the
// bias gradients) with central finite differences of the loss.
func TestGradcheckMLP(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	sgd0 := ir.Optimizer{Kind: "sgd", LR: 1e-300} // updates are negligible: params stay put to ~1e-300
	for _, fuse := range []bool{true, false} {
		p, err := compiler.Compile(irtest.MLP(ir.F64, 5, 6, 3, 0, sgd0), compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 4, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(4, 5))
		x := make([]float64, 4*5)
		for i := range x {
			x[i] = rng.NormFloat64()
		}
		y := []int32{0, 2, 1, 2}
		loss := func() float64 {
			if err := s.WriteInput("x", x, 4); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteInput("y", y, 4); err != nil {
				t.Fatal(err)
			}
			if err := s.Run("step", 4); err != nil {
				t.Fatal(err)
			}
			i, _ := s.Lookup("output", "loss")
			v, _ := s.ReadFloats(i)
			return v[0]
		}
		l1, l2, l3 := loss(), loss(), loss()
		t.Logf("fuse=%v loss repeated: %.17g %.17g %.17g", fuse, l1, l2, l3)
		grads := map[string][]float64{}
		for _, name := range s.Names("param") {
			gi, _ := s.Lookup("grad", name)
			grads[name], _ = s.ReadFloats(gi)
		}
		const eps = 1e-6
		for _, name := range s.Names("param") {
			pi, _ := s.Lookup("param", name)
			w, _ := s.ReadFloats(pi)
			for k := range w {
				orig := w[k]
				w[k] = orig + eps
				s.WriteFloats(pi, w)
				up := loss()
				w[k] = orig - eps
				s.WriteFloats(pi, w)
				down := loss()
				w[k] = orig
				s.WriteFloats(pi, w)
				num := (up - down) / (2 * eps)
				// Central differences in f64: atol 1e-5, rtol 1e-3.
				if g := grads[name][k]; math.Abs(g-num) > 1e-5+1e-3*math.Abs(num) {
					t.Errorf("fuse=%v %s[%d]: autodiff %g, finite differences %g", fuse, name, k, g, num)
				}
			}
		}
		s.Close()
	}
}
