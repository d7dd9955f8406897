package seqoracle

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Model is what the tests need of a generated sequence package; Step and
// Predict are bound to the inputs by the caller.
type Model interface {
	Params() []string
	Param(name string) ([]float32, error)
	Grad(name string) ([]float32, error)
}

// Snapshot copies every parameter.
func Snapshot(t *testing.T, m Model) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for _, n := range m.Params() {
		p, err := m.Param(n)
		if err != nil {
			t.Fatal(err)
		}
		out[n] = p
	}
	return out
}

// Unchanged fails unless every parameter is bit for bit as in before.
func Unchanged(t *testing.T, what string, m Model, before map[string][]float32) {
	t.Helper()
	for n, p := range Snapshot(t, m) {
		for i := range p {
			if math.Float32bits(p[i]) != math.Float32bits(before[n][i]) {
				t.Fatalf("%s changed %s[%d]: %v -> %v", what, n, i, before[n][i], p[i])
			}
		}
	}
}

// BadInput checks that err is an error containing every one of want.
func BadInput(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("%s: error %q does not say %q", what, err, w)
		}
	}
}

// MatchSteps compares the losses, gradients and parameters of two models
// trained side by side (steps calls each of stepA and stepB); rtol and
// atol bound every comparison.
func MatchSteps(t *testing.T, a, b Model, steps int, stepA, stepB func() (float32, error), rtol, atol float64) {
	t.Helper()
	near := func(x, y float32) bool { return math.Abs(float64(x-y)) <= atol+rtol*math.Abs(float64(y)) }
	for s := 1; s <= steps; s++ {
		la, err := stepA()
		if err != nil {
			t.Fatal(err)
		}
		lb, err := stepB()
		if err != nil {
			t.Fatal(err)
		}
		if !near(la, lb) {
			t.Fatalf("step %d: loss %v vs %v", s, la, lb)
		}
		for _, n := range a.Params() {
			for _, kind := range []string{"grad", "param"} {
				get := func(m Model) []float32 {
					var v []float32
					var err error
					if kind == "grad" {
						v, err = m.Grad(n)
					} else {
						v, err = m.Param(n)
					}
					if err != nil {
						t.Fatal(err)
					}
					return v
				}
				va, vb := get(a), get(b)
				for i := range va {
					if !near(va[i], vb[i]) {
						t.Fatalf("step %d: %s %s", s, kind, fmt.Sprintf("%s[%d] %v vs %v", n, i, va[i], vb[i]))
					}
				}
			}
		}
	}
}

// Line is "file:line" of the first line of the model file (relative to the
// module root, as errors name it) that holds call.
func Line(t *testing.T, file, call string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, call) {
			return fmt.Sprintf("%s:%d", file, i+1)
		}
	}
	t.Fatalf("%s has no %q", file, call)
	return ""
}
