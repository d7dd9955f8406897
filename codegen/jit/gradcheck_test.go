package jit

import (
	"fmt"
	"math"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestGradcheckOps compares, in f64, every gradient of every op case of
// opGroups (operands, grad_output G and the loss scale) with central finite
// differences of the loss. The G gradients are the op's forward values, so
// this checks the forward pass as well. Operand data keeps relu, abs and
// max away from their kinks and ties (see the domains in
// ops_oracle_test.go).
func TestGradcheckOps(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	groups := opGroups()
	for gi, name := range groupNames(groups) {
		m, data, _, err := buildOpModel(ir.F64, groups[name], 0, uint64(100+gi))
		if err != nil {
			t.Fatalf("group %s: %v", name, err)
		}
		for _, fuse := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fuse=%v", name, fuse), func(t *testing.T) {
				s := opSession(t, dev, m, fuse, data)
				defer s.Close()
				loss := func() float64 {
					// SGD at lr 0 leaves the parameters exactly as written.
					if err := s.Run("step", 1); err != nil {
						t.Fatal(err)
					}
					return readNamed(t, s, "output", "loss")[0]
				}
				loss()
				grads := map[string][]float64{}
				for _, n := range s.Names("grad") {
					grads[n] = readNamed(t, s, "grad", n)
				}
				const eps = 1e-6
				for _, n := range s.Names("param") {
					pi, err := s.Lookup("param", n)
					if err != nil {
						t.Fatal(err)
					}
					w := append([]float64(nil), data.floats[n]...)
					var got, num []float64
					for _, k := range sample(len(w)) {
						orig := w[k]
						w[k] = orig + eps
						s.WriteFloats(pi, w)
						up := loss()
						w[k] = orig - eps
						s.WriteFloats(pi, w)
						down := loss()
						w[k] = orig
						num = append(num, (up-down)/(2*eps))
						got = append(got, grads[n][k])
					}
					if err := s.WriteFloats(pi, w); err != nil {
						t.Fatal(err)
					}
					// Central differences in f64 with eps 1e-6: truncation
					// error ~eps² and rounding ~1e-16/eps, far inside
					// atol 1e-5, rtol 1e-3.
					closeTo(t, "d loss/d "+n+" (sampled elements)", got, num, 1e-3, 1e-5)
				}
			})
		}
	}
}

// sample picks at most 9 element indices of n, spread evenly and always
// including the first and last: each "step" costs milliseconds on the CPU
// backend, and a wrong broadcast or reduction index shows in any block.
func sample(n int) []int {
	const most = 9
	if n <= most {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, most)
	for i := range out {
		out[i] = i * (n - 1) / (most - 1)
	}
	return out
}

// TestMismatch checks the comparison itself, so that a broken one (say,
// one that lets NaN through) cannot make the tests above pass silently.
func TestMismatch(t *testing.T) {
	for _, c := range []struct {
		got, want []float64
		ok        bool
	}{
		{[]float64{1, 2}, []float64{1, 2.001}, true},
		{[]float64{1, 2}, []float64{1, 2.01}, false},
		{[]float64{1e-6}, []float64{0}, true},
		{[]float64{1e-4}, []float64{0}, false},
		{[]float64{math.NaN()}, []float64{1}, false},
		{[]float64{1}, []float64{1, 1}, false},
	} {
		if ok := mismatch(c.got, c.want, 1e-3, 1e-5) == ""; ok != c.ok {
			t.Errorf("mismatch(%v, %v) accepts: %v, want %v", c.got, c.want, ok, c.ok)
		}
	}
}
