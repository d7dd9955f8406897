package jit

import (
	"fmt"
	"math"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestClipValueHugeGradient: the input that makes TestUpdateCheck's
// update overflow (gradients near 1e36 in f32, 1e305 in f64) trains when
// the optimizer clips gradient values: the update check and its bound
// read the clamped gradient, so the step succeeds without an element-by-
// element check, and plain SGD moves each parameter by lr·clamp(g), at
// most lr·c and exactly that where the gradient was clamped. f32 and f64,
// fused and unfused.
func TestClipValueHugeGradient(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const lr, c = 0.1, 0.5
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, opt := range []ir.Optimizer{
			{Kind: "sgd", LR: lr, ClipValue: c},
			{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipValue: c},
			{Kind: "sgd", LR: lr, Momentum: 0.9, ClipValue: c},
		} {
			for _, fuse := range []bool{true, false} {
				what := fmt.Sprintf("%s/%s/fuse=%v", dt, opt.Kind, fuse)
				p, err := compiler.Compile(irtest.MLP(dt, 4, 5, 3, 0, opt), compiler.Options{Fuse: fuse})
				if err != nil {
					t.Fatal(err)
				}
				s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 2, Seed: 3})
				if err != nil {
					t.Fatal(err)
				}
				huge := 1e36
				if dt == ir.F64 {
					huge = 1e305
				}
				if err := s.WriteInput("x", castTo(dt, []float64{huge, 0, 0, 0, huge, 0, 0, 0}), 2); err != nil {
					t.Fatal(err)
				}
				if err := s.WriteInput("y", []int32{0, 2}, 2); err != nil {
					t.Fatal(err)
				}
				before := snapshot(t, s)
				if err := s.Run("step", 2); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if s.UpdateCheckFull() {
					t.Errorf("%s: the clamped update was checked element by element: the bound covers every clamped gradient", what)
				}
				after := snapshot(t, s)
				finiteSnapshot(t, what, after)
				if opt.Kind == "sgd" && opt.Momentum == 0 {
					gi, _ := s.Lookup("grad", "fc1.weight")
					g, err := s.ReadFloats(gi)
					if err != nil {
						t.Fatal(err)
					}
					w0, w1 := before["param:fc1.weight"], after["param:fc1.weight"]
					clamped := 0
					for i := range g {
						want := w0[i] - lr*math.Max(-c, math.Min(c, g[i]))
						// One rounding of the update, f32 or f64: rtol 1e-6.
						if math.Abs(w1[i]-want) > 1e-6*math.Max(1, math.Abs(want)) {
							t.Fatalf("%s: fc1.weight[%d] = %v, want %v (gradient %v)", what, i, w1[i], want, g[i])
						}
						if math.Abs(g[i]) > c {
							clamped++
						}
					}
					if clamped == 0 {
						t.Fatalf("%s: no gradient above the clip bound: the test tests nothing", what)
					}
				}
				s.Close()
			}
		}
	}
}
