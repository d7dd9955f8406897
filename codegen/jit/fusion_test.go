package jit

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// trace is what a few training steps of a model produce.
type trace struct {
	launches int
	loss     []float64
	grads    map[string][]float64 // after step 1
	params   map[string][]float64 // after the last step
}

func trainTrace(t *testing.T, dev runtime.Device, m *ir.Model, fuse bool, x []float32, y []int32, rows, steps int) trace {
	t.Helper()
	p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: rows, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	tr := trace{grads: map[string][]float64{}, params: map[string][]float64{}}
	for _, f := range s.Plan().Funcs {
		if f.Name != "step" {
			continue
		}
		for _, st := range f.Steps {
			if st.Kind == runtime.LaunchStep {
				tr.launches++
			}
		}
	}
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

// TestFusedMatchesUnfused trains irtest.MLP with dropout from the same seed
// on the same batch, fused and unfused, and compares the loss of every
// step, every gradient of step 1 and every parameter after 3 Adam steps.
// Both plans draw the same dropout masks (Philox by element index) and use
// the same GEMMs; they differ in how elementwise ops are grouped and in the
// order of the cross-entropy's atomic adds of the row losses.
func TestFusedMatchesUnfused(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const in, hidden, classes, rows, steps = 37, 29, 10, 9, 3
	rng := rand.New(rand.NewPCG(31, 32))
	x := make([]float32, rows*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	y := make([]int32, rows)
	for i := range y {
		y[i] = int32(rng.IntN(classes))
	}
	m := irtest.MLP(ir.F32, in, hidden, classes, 0.2, irtest.Adam)
	fused := trainTrace(t, dev, m, true, x, y, rows, steps)
	unfused := trainTrace(t, dev, m, false, x, y, rows, steps)
	if fused.launches >= unfused.launches {
		t.Errorf("fused step launches %d kernels, unfused %d: fusion saved nothing", fused.launches, unfused.launches)
	}
	t.Logf("step kernel launches: fused %d, unfused %d", fused.launches, unfused.launches)
	// The same f32 operations in the same order except the cross-entropy
	// loss sum (atomics); fused chains keep intermediates in registers,
	// which in f32 rounds the same as storing them. Observed: gradients and
	// parameters agree bit for bit, the loss within an ulp: rtol 1e-6,
	// atol 1e-9.
	const rtol, atol = 1e-6, 1e-9
	closeTo(t, "loss per step", fused.loss, unfused.loss, rtol, atol)
	if len(fused.grads) == 0 || len(fused.grads) != len(unfused.grads) {
		t.Fatalf("fused has %d gradients, unfused %d", len(fused.grads), len(unfused.grads))
	}
	for n, g := range unfused.grads {
		closeTo(t, fmt.Sprintf("step 1 grad %s", n), fused.grads[n], g, rtol, atol)
	}
	for n, p := range unfused.params {
		closeTo(t, fmt.Sprintf("param after %d steps %s", steps, n), fused.params[n], p, rtol, atol)
	}
}
