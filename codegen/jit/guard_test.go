package jit

import (
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestNonFiniteGradientSkipsStep: a finite loss whose gradient is not
// finite (sqrt(|v|) at v = 0: the gradient is 0·∞) fails the step on the
// device's guard (compiler/guard.go) and changes nothing: parameters,
// Adam's moments, the step count. Fused and unfused plans.
func TestNonFiniteGradientSkipsStep(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(4))
	y := b.Input("y", ir.I32, ir.S("B"))
	w := b.Param("w", ir.F32, 0.5, 3, 4)
	v := b.Param("v", ir.F32, 0.5, 3)
	h := b.Op("matmul", ir.Attrs{TransB: true}, x, w)
	logits := b.Op("add", ir.Attrs{}, h, b.Op("sqrt", ir.Attrs{}, b.Op("abs", ir.Attrs{}, v)))
	b.Pos = ir.Pos{File: "model.go", Line: 30}
	loss := b.Op("cross_entropy", ir.Attrs{}, logits, y)
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	m := b.Model("guard", loss, logits, ir.Optimizer{Kind: "adam", LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	for _, fuse := range []bool{true, false} {
		p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 2, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WriteInput("x", []float32{1, 2, 3, 4, -1, 0, 1, 2}, 2); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteInput("y", []int32{0, 2}, 2); err != nil {
			t.Fatal(err)
		}
		if err := s.Run("step", 2); err != nil { // Adam's moments non-zero
			t.Fatal(err)
		}
		vi, _ := s.Lookup("param", "v")
		if err := s.WriteFloats(vi, []float64{0, 1, 1}); err != nil {
			t.Fatal(err)
		}
		before := map[string][]float64{}
		for _, role := range []string{"param", "state"} {
			for _, n := range s.Names(role) {
				i, _ := s.Lookup(role, n)
				before[role+":"+n], _ = s.ReadFloats(i)
			}
		}
		err = s.Run("step", 2)
		if err == nil || !strings.Contains(err.Error(), "cross_entropy (model.go:30)") || !strings.Contains(err.Error(), "gradient") {
			t.Fatalf("fuse=%v: %v, want a non-finite gradient error", fuse, err)
		}
		if l, _ := s.StepLoss(); math.IsNaN(l) || math.IsInf(l, 0) {
			t.Fatalf("fuse=%v: the loss %v should be finite", fuse, l)
		}
		if s.Steps() != 1 {
			t.Fatalf("fuse=%v: step count %d, want 1", fuse, s.Steps())
		}
		for k, want := range before {
			role, name, _ := strings.Cut(k, ":")
			i, _ := s.Lookup(role, name)
			got, _ := s.ReadFloats(i)
			for j := range want {
				if math.Float64bits(got[j]) != math.Float64bits(want[j]) {
					t.Fatalf("fuse=%v: %s[%d] changed: %v → %v", fuse, k, j, want[j], got[j])
				}
			}
		}
		if err := s.WriteFloats(vi, []float64{1, 1, 1}); err != nil {
			t.Fatal(err)
		}
		if err := s.Run("step", 2); err != nil {
			t.Fatalf("fuse=%v: the next good step: %v", fuse, err)
		}
		s.Close()
	}
}
