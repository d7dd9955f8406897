package jit

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// BatchNorm2d as a layer with state: the op tests (conv_oracle_test.go)
// check its training-mode forward and backward with fixed statistics;
// these check what only a stateful model shows: the running statistics
// after training steps, eval mode, checkpoints, and gradients once the
// running mean (the shift of the one-pass statistics) is no longer 0.

// bnModel is BatchNorm2d on an n×c×h×w x with loss sum(y·g). x and g are
// parameters, so that the step yields dx; SGD at lr 0 keeps every
// parameter as written.
func bnModel(dt ir.DType, n, c, h, w int) *ir.Model {
	b := irtest.New()
	x := b.Source("param", ir.Param, "x", dt, ir.Static(n, c, h, w), "const:0")
	g := b.Source("param", ir.Param, "g", dt, ir.Static(n, c, h, w), "const:0")
	gamma := b.Source("param", ir.Param, "bn.weight", dt, ir.Static(c), "const:1")
	beta := b.Source("param", ir.Param, "bn.bias", dt, ir.Static(c), "const:0")
	rm := b.Source("state", ir.State, "bn.running_mean", dt, ir.Static(c), "const:0")
	rv := b.Source("state", ir.State, "bn.running_var", dt, ir.Static(c), "const:1")
	y, nm, nv := ops.BatchNorm2d(b.Builder, x, gamma, beta, rm, rv, 0.1, 1e-5)
	b.F.Updates = append(b.F.Updates, ir.Update{State: rm, New: nm}, ir.Update{State: rv, New: nv})
	loss := b.Op("sum", ir.Attrs{}, b.Binary("mul", y, g))
	return b.Model("bn", loss, y, ir.Optimizer{Kind: "sgd", LR: 0})
}

type bnData struct {
	x1, x2, xe, g, w, b []float64
}

func newBNData(rng *rand.Rand, n, c, h, w int) bnData {
	m := n * c * h * w
	gen := func(k int, mean, std float64) []float64 {
		v := make([]float64, k)
		for i := range v {
			v[i] = mean + std*rng.NormFloat64()
		}
		return v
	}
	// Batches off zero mean and unit variance, so the running statistics
	// move visibly.
	return bnData{x1: gen(m, 0.7, 2), x2: gen(m, -0.4, 1.5), xe: gen(m, 0.2, 1.8), g: gen(m, 0, 1), w: gen(c, 1, 0.5), b: gen(c, 0, 0.5)}
}

func writeParams(t *testing.T, s *runtime.Session, vals map[string][]float64) {
	t.Helper()
	for name, v := range vals {
		i, err := s.Lookup("param", name)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WriteFloats(i, v); err != nil {
			t.Fatal(err)
		}
	}
}

func bnSession(t *testing.T, dev runtime.Device, m *ir.Model, fuse bool, d bnData) *runtime.Session {
	t.Helper()
	p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	writeParams(t, s, map[string][]float64{"bn.weight": d.w, "bn.bias": d.b, "g": d.g})
	return s
}

// runBN writes x and runs fn (step or predict).
func runBN(t *testing.T, s *runtime.Session, fn string, x []float64) {
	t.Helper()
	writeParams(t, s, map[string][]float64{"x": x})
	if err := s.Run(fn, 1); err != nil {
		t.Fatal(err)
	}
}

// TestBatchNormRunningStatsOracle runs two training steps and an eval-mode
// predict, fused and unfused, and compares the running statistics and the
// eval output with torch.nn.functional.batch_norm's buffers; then checks
// that eval mode leaves the statistics alone and that a checkpoint carries
// them into a fresh session.
func TestBatchNormRunningStatsOracle(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	shapes := [][4]int{{3, 5, 7, 4}, {2, 3, 1, 5}}
	rng := rand.New(rand.NewPCG(7, 7))
	var data []bnData
	var req []oracle.Case
	for _, sh := range shapes {
		n, c, h, w := sh[0], sh[1], sh[2], sh[3]
		d := newBNData(rng, n, c, h, w)
		data = append(data, d)
		x := []int{n, c, h, w}
		req = append(req, oracle.Case{Op: "batch_norm2d_steps", DType: "f32", Inputs: []oracle.Tensor{
			{Shape: x, Data: d.x1}, {Shape: x, Data: d.x2}, {Shape: x, Data: d.xe}, {Shape: []int{c}, Data: d.w}, {Shape: []int{c}, Data: d.b}}})
	}
	want, err := oracle.Run(req)
	if err != nil {
		t.Fatal(err)
	}
	for si, sh := range shapes {
		n, c := sh[0], sh[1]
		d, w := data[si], want[si].Output.Data
		m := bnModel(ir.F32, n, c, sh[2], sh[3])
		for _, fuse := range []bool{true, false} {
			t.Run(fmt.Sprintf("%v/fuse=%v", sh, fuse), func(t *testing.T) {
				s := bnSession(t, dev, m, fuse, d)
				defer s.Close()
				runBN(t, s, "step", d.x1)
				runBN(t, s, "step", d.x2)
				rm, rv := readNamed(t, s, "state", "bn.running_mean"), readNamed(t, s, "state", "bn.running_var")
				// f32 sums over at most 84 elements per channel, in a
				// different order than torch's: rtol 1e-5.
				closeTo(t, "running_mean after 2 steps", rm, w[:c], 1e-5, 1e-6)
				closeTo(t, "running_var after 2 steps", rv, w[c:2*c], 1e-5, 1e-6)

				s.SetTrain(false)
				runBN(t, s, "predict", d.xe)
				out := readNamed(t, s, "output", "output")
				// One normalisation with the same statistics, rounded
				// per op: rtol 1e-4 as the op tests.
				closeTo(t, "eval output", out, w[2*c:], 1e-4, 1e-5)
				runBN(t, s, "step", d.x1) // eval mode: gradients, no statistics
				if got := readNamed(t, s, "state", "bn.running_mean"); !slices.Equal(got, rm) {
					t.Errorf("eval mode moved running_mean %v → %v", rm, got)
				}
				if got := readNamed(t, s, "state", "bn.running_var"); !slices.Equal(got, rv) {
					t.Errorf("eval mode moved running_var %v → %v", rv, got)
				}

				var ckpt bytes.Buffer
				if err := s.Save(&ckpt); err != nil {
					t.Fatal(err)
				}
				s2 := bnSession(t, dev, m, fuse, bnData{w: make([]float64, c), b: make([]float64, c), g: d.g})
				defer s2.Close()
				if err := s2.Load(&ckpt); err != nil {
					t.Fatal(err)
				}
				for _, name := range []string{"bn.running_mean", "bn.running_var"} {
					if got, want := readNamed(t, s2, "state", name), readNamed(t, s, "state", name); !slices.Equal(got, want) {
						t.Errorf("%s after Load: %v, saved %v", name, got, want)
					}
				}
				s2.SetTrain(false)
				runBN(t, s2, "predict", d.xe)
				if got := readNamed(t, s2, "output", "output"); !slices.Equal(got, out) {
					t.Errorf("eval output after Load differs from the saved session's")
				}
			})
		}
	}
}

// TestGradcheckBatchNorm checks every gradient of BatchNorm2d in training
// mode (dx, dweight, dbias) against central differences in f64, fused and
// unfused, after two steps have moved the running mean away from 0, so the
// shifted statistics are exercised with a nonzero shift.
func TestGradcheckBatchNorm(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const n, c, h, w = 3, 4, 5, 2
	d := newBNData(rand.New(rand.NewPCG(3, 3)), n, c, h, w)
	m := bnModel(ir.F64, n, c, h, w)
	for _, fuse := range []bool{true, false} {
		t.Run(fmt.Sprintf("fuse=%v", fuse), func(t *testing.T) {
			s := bnSession(t, dev, m, fuse, d)
			defer s.Close()
			runBN(t, s, "step", d.x1)
			runBN(t, s, "step", d.x2)
			if rm := readNamed(t, s, "state", "bn.running_mean"); rm[0] == 0 {
				t.Fatal("running mean still 0 after two steps")
			}
			params := map[string][]float64{"x": d.xe, "bn.weight": d.w, "bn.bias": d.b}
			loss := func() float64 {
				runBN(t, s, "step", params["x"])
				return readNamed(t, s, "output", "loss")[0]
			}
			loss()
			grads := map[string][]float64{}
			for name := range params {
				grads[name] = readNamed(t, s, "grad", name)
			}
			const eps = 1e-6
			for name, vals := range params {
				pi, err := s.Lookup("param", name)
				if err != nil {
					t.Fatal(err)
				}
				var got, num []float64
				for _, k := range sample(len(vals)) {
					orig := vals[k]
					vals[k] = orig + eps
					s.WriteFloats(pi, vals)
					up := loss()
					vals[k] = orig - eps
					s.WriteFloats(pi, vals)
					down := loss()
					vals[k] = orig
					s.WriteFloats(pi, vals)
					num = append(num, (up-down)/(2*eps))
					got = append(got, grads[name][k])
				}
				// As in TestGradcheckOps: f64 central differences, eps 1e-6.
				// Each step moves the running mean, which shifts the
				// statistics but, in f64, not the loss beyond ~1e-14.
				closeTo(t, "d loss/d "+name+" (sampled elements)", got, num, 1e-3, 1e-5)
			}
		})
	}
}
