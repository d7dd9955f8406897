// Package seqoracle checks a seed sequence model (models/rnn, models/lstm)
// against PyTorch's torch.nn.RNN and torch.nn.LSTM at small, odd sizes:
// the model is compiled at run time (codegen/jit), in f32 or f64, and
// testdata/oracle/torch_seq.py runs the same model from the same weights.
// It serves the models' tests only.
package seqoracle

import (
	"fmt"
	"math"
	"testing"

	"github.com/ngen-ml/ngen/codegen/jit"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// Case is one model and batch.
type Case struct {
	Kind  string // torch_seq.py's model: rnn, lstm or charlm
	Model *dsl.Model
	Sizes map[string]int // vocab, emb, hidden, layers, T, classes
	Rows  int
	// Inputs by name: []int32 (x, y, mask) or []float64 (h0, c0, written
	// in the model's dtype).
	Inputs map[string]any
	Steps  int
	// RTol and ATol bound every comparison: forward results, losses,
	// gradients and parameters after the steps.
	RTol, ATol float64
}

type result struct {
	Output []float64            `json:"output"`
	HN     []float64            `json:"hn"`
	CN     []float64            `json:"cn"`
	Loss   []float64            `json:"loss"`
	Grads  map[string][]float64 `json:"grads"`
	Params map[string][]float64 `json:"params"`
}

type tensor struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

// Check runs c in ngen (fused and unfused) and in PyTorch and compares.
func Check(t *testing.T, c Case) {
	t.Helper()
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	m, err := c.Model.Build()
	if err != nil {
		t.Fatal(err)
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	base, err := cpu.New(cpu.Options{Baseline: true})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	var want *result
	var init map[string][]float64
	// The last run takes the CPU backend's baseline forms of the
	// recurrence kernels (cpu.Options.Baseline), which follow the GPU
	// form's arithmetic step for step.
	for i, fuse := range []bool{true, false, true} {
		baseline := i == 2
		t.Run(fmt.Sprintf("fuse=%v/baseline=%v", fuse, baseline), func(t *testing.T) {
			dev := dev
			if baseline {
				dev = base
			}
			prog, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
			if err != nil {
				t.Fatal(err)
			}
			s, err := jit.Session(dev, prog, runtime.SessionOptions{MaxBatch: c.Rows, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			params := map[string][]float64{}
			for _, n := range s.Names("param") {
				params[n] = read(t, s, "param", n)
				if init != nil && fmt.Sprint(params[n]) != fmt.Sprint(init[n]) {
					t.Fatalf("%s: the fused and unfused sessions drew different weights from one seed", n)
				}
			}
			if want == nil {
				init = params
				if want, err = torch(c, m, params); err != nil {
					t.Fatal(err)
				}
			}
			compare(t, c, run(t, s, c), want)
		})
	}
}

func read(t *testing.T, s *runtime.Session, role, name string) []float64 {
	t.Helper()
	i, err := s.Lookup(role, name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.ReadFloats(i)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// write feeds every input, floats in the model's dtype.
func write(t *testing.T, s *runtime.Session, c Case, dt ir.DType) {
	t.Helper()
	for name, v := range c.Inputs {
		if f, ok := v.([]float64); ok && dt == ir.F32 {
			f32 := make([]float32, len(f))
			for i := range f {
				f32[i] = float32(f[i])
			}
			v = f32
		}
		if err := s.WriteInput(name, v, c.Rows); err != nil {
			t.Fatal(err)
		}
	}
}

// run takes ngen's forward results, then c.Steps training steps.
func run(t *testing.T, s *runtime.Session, c Case) *result {
	t.Helper()
	dt := ir.F32
	if s.Plan().DType == runtime.F64 {
		dt = ir.F64
	}
	r := &result{Grads: map[string][]float64{}, Params: map[string][]float64{}}
	write(t, s, c, dt)
	if err := s.Run("predict", c.Rows); err != nil {
		t.Fatal(err)
	}
	r.Output = read(t, s, "output", "output")
	if c.Kind != "charlm" { // the language model returns the logits only
		r.HN = read(t, s, "output", "hn")
	}
	if c.Kind == "lstm" {
		r.CN = read(t, s, "output", "cn")
	}
	for step := 0; step < c.Steps; step++ {
		write(t, s, c, dt)
		if err := s.Run("step", c.Rows); err != nil {
			t.Fatal(err)
		}
		r.Loss = append(r.Loss, read(t, s, "output", "loss")[0])
		if step == 0 {
			for _, n := range s.Names("grad") {
				r.Grads[n] = read(t, s, "grad", n)
			}
		}
	}
	for _, n := range s.Names("param") {
		r.Params[n] = read(t, s, "param", n)
	}
	return r
}

func torch(c Case, m *ir.Model, params map[string][]float64) (*result, error) {
	req := map[string]any{"model": c.Kind, "dtype": m.Loss.DType.String(), "sizes": c.Sizes, "steps": c.Steps,
		"optimizer": m.Optimizer}
	ps := map[string]tensor{}
	for n, p := range params {
		ps[n] = tensor{Data: p}
	}
	req["params"] = ps
	for n, v := range c.Inputs {
		req[n] = v
	}
	var r result
	if err := oracle.RunScript("torch_seq.py", req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func compare(t *testing.T, c Case, got, want *result) {
	t.Helper()
	check := func(what string, g, w []float64) {
		t.Helper()
		if len(g) != len(w) {
			t.Errorf("%s: %d values, want %d", what, len(g), len(w))
			return
		}
		for i := range w {
			if d := math.Abs(g[i] - w[i]); !(d <= c.ATol+c.RTol*math.Abs(w[i])) {
				t.Errorf("%s[%d] = %v, want %v (rtol %g, atol %g)", what, i, g[i], w[i], c.RTol, c.ATol)
				return
			}
		}
	}
	check("forward output", got.Output, want.Output)
	if c.Kind != "charlm" {
		check("forward hn", got.HN, want.HN)
	}
	if c.Kind == "lstm" {
		check("forward cn", got.CN, want.CN)
	}
	check("losses", got.Loss, want.Loss)
	if len(got.Grads) != len(want.Grads) {
		t.Errorf("%d gradients, PyTorch %d", len(got.Grads), len(want.Grads))
	}
	for n, w := range want.Grads {
		check("step 1 gradient "+n, got.Grads[n], w)
	}
	for n, w := range want.Params {
		check(fmt.Sprintf("%s after %d steps", n, c.Steps), got.Params[n], w)
	}
}
