package jit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestGPUFormsJITModels trains the test models with the kernels' GPU forms
// (cpu.Options.GPUForms: grid-stride loops, warp shuffles and launch
// shapes as a GPU runs them) and with the CPU forms, in f64, fused and
// unfused, and compares. The models reach forms the generated packages
// do not: a cross-entropy wide enough to give each row a warp (its max
// and sum are warp butterflies), the vision layers' im2col/col2im and
// pooling kernels, an LSTM's scan (in both GPU forms: the whole loop in a
// block per sequence, and stepped, a time step a launch), and cross-entropies with an ignore
// index (two of the five rows ignored: the count of kept rows). Only the order of reduction sums
// differs between the two, so f64 agrees to rtol 1e-10 (loss), 1e-9
// plus 1e-12 of the largest (gradients and parameters).
func TestGPUFormsJITModels(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles every test model twice (-short)")
	}
	gpu, err := cpu.New(cpu.Options{Threads: 2, GPUForms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	host, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	const rows = 5
	for _, tc := range []struct {
		name string
		m    *ir.Model
		in   int // input elements per row
		cls  int
		ign  bool // rows 1 and 3 take ignore index -100
		// form: the recurrences' GPU form (the tiny LSTM's default is
		// the loop form; -loop-form stepped runs its stepped one).
		form ops.StepForm
	}{
		{"mlp dropout", irtest.MLP(ir.F64, 7, 9, 4, 0.2, irtest.Adam), 7, 4, false, ops.StepAuto},
		{"mlp 100 classes", irtest.MLP(ir.F64, 6, 40, 100, 0, irtest.Adam), 6, 100, false, ops.StepAuto},
		{"mlp ignore", withIgnore(irtest.MLP(ir.F64, 7, 9, 4, 0, irtest.Adam), -100), 7, 4, true, ops.StepAuto},
		{"mlp 100 classes ignore", withIgnore(irtest.MLP(ir.F64, 6, 40, 100, 0, irtest.Adam), -100), 6, 100, true, ops.StepAuto},
		{"convnet", irtest.ConvNet(ir.F64, 5, irtest.Adam), 4 * 9 * 8, 5, false, ops.StepAuto},
		{"lstm checkpoint", irtest.DeepLSTM(ir.F64, 4, 3, 5, 2, 3, 1), 4 * 3, 3, false, ops.StepAuto},
		{"lstm checkpoint stepped", irtest.DeepLSTM(ir.F64, 4, 3, 5, 2, 3, 1), 4 * 3, 3, false, ops.StepAlways},
	} {
		for _, fuse := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fuse=%v", tc.name, fuse), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(4, 2))
				x := make([]float64, rows*tc.in)
				for i := range x {
					x[i] = rng.NormFloat64()
				}
				y := make([]int32, rows)
				for i := range y {
					y[i] = int32(rng.IntN(tc.cls))
				}
				if tc.ign {
					y[1], y[3] = -100, -100
				}
				a := trainTrace64(t, gpu, tc.m, compiler.Options{Fuse: fuse, StepForm: tc.form}, x, y, rows, 2)
				b := trainTrace64(t, host, tc.m, compiler.Options{Fuse: fuse, StepForm: tc.form}, x, y, rows, 2)
				for i := range b.loss {
					if math.Abs(a.loss[i]-b.loss[i]) > 1e-10*math.Abs(b.loss[i]) || math.IsNaN(a.loss[i]) {
						t.Fatalf("step %d: loss %v with the GPU forms, %v without", i+1, a.loss[i], b.loss[i])
					}
				}
				for what, pair := range map[string][2]map[string][]float64{"grad": {a.grads, b.grads}, "param": {a.params, b.params}} {
					for n, want := range pair[1] {
						got := pair[0][n]
						big := 0.0
						for _, v := range want {
							big = math.Max(big, math.Abs(v))
						}
						for i := range want {
							if math.Abs(got[i]-want[i]) > 1e-9*math.Abs(want[i])+1e-12*big || math.IsNaN(got[i]) {
								t.Fatalf("%s %s[%d] = %v with the GPU forms, %v without", what, n, i, got[i], want[i])
							}
						}
					}
				}
			})
		}
	}
}

// trainTrace64 is trainTrace for a model with f64 inputs.
func trainTrace64(t *testing.T, dev runtime.Device, m *ir.Model, opts compiler.Options, x []float64, y []int32, rows, steps int) trace {
	t.Helper()
	p, err := compiler.Compile(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: rows, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tr := trace{grads: map[string][]float64{}, params: map[string][]float64{}}
	for step := 1; step <= steps; step++ {
		if err := s.WriteInput("x", x, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteInput("y", y, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.Run("step", rows); err != nil {
			t.Fatal(err)
		}
		tr.loss = append(tr.loss, readNamed(t, s, "output", "loss")[0])
		if step == 1 {
			for _, n := range s.Names("grad") {
				tr.grads[n] = readNamed(t, s, "grad", n)
			}
		}
	}
	for _, n := range s.Names("param") {
		tr.params[n] = readNamed(t, s, "param", n)
	}
	return tr
}
