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
	dev, base := devices(t)
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
			s := session(t, dev, m, fuse, c.Rows)
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

// session compiles m (fused or not) and opens it on dev at batch rows,
// the weights drawn from one seed whatever the form.
func session(t *testing.T, dev runtime.Device, m *ir.Model, fuse bool, rows int) *runtime.Session {
	t.Helper()
	prog, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
	if err != nil {
		t.Fatal(err)
	}
	s, err := jit.Session(dev, prog, runtime.SessionOptions{MaxBatch: rows, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// devices opens the CPU device with its host forms and one with the
// baseline forms (cpu.Options.Baseline: the recurrences follow the GPU
// form's arithmetic step for step), closed when the test ends.
func devices(t *testing.T) (dev, base runtime.Device) {
	t.Helper()
	for i, o := range []cpu.Options{{}, {Baseline: true}} {
		d, err := cpu.New(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if i == 0 {
			dev = d
		} else {
			base = d
		}
	}
	return dev, base
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
	if m.Precision != nil && m.Precision.Type == ir.BF16 {
		req["amp"] = "bf16"
	}
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

// pair is one result of two runs, by name.
type pair struct {
	name      string
	got, want []float64
}

// forward pairs the forward results a model of kind returns: the
// logits, and the final states but for the language model's.
func forward(kind string, got, want *result) []pair {
	out := []pair{{"forward output", got.Output, want.Output}}
	if kind != "charlm" {
		out = append(out, pair{"forward hn", got.HN, want.HN})
	}
	if kind == "lstm" {
		out = append(out, pair{"forward cn", got.CN, want.CN})
	}
	return out
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
	for _, f := range forward(c.Kind, got, want) {
		check(f.name, f.got, f.want)
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

// AMPCase is a mixed-precision check of one model: Build makes it with the
// given policy (nil: f32), the rest as Case.
type AMPCase struct {
	Case
	Build func(p *dsl.AMP) *dsl.Model
	// Tol bounds the bf16 runs against PyTorch's autocast and against
	// each other, F32Tol the bf16 and f16 runs against ngen's f32 run:
	// logits and gradients within a share of each tensor's largest
	// magnitude, losses relatively, parameters after the steps as
	// vectors (the difference's norm against the update's).
	Tol, F32Tol AMPTol
}

// AMPTol is one comparison's tolerances.
type AMPTol struct{ Loss, Values, Update float64 }

// CheckAMP trains c under dsl.AMP{Type: dsl.BF16}, fused, unfused and in
// the baseline forms, and compares each with PyTorch training the same
// model under torch.autocast(device_type="cpu", dtype=torch.bfloat16)
// (torch_seq.py's "amp"), with each other, and with ngen's f32 run; and
// the fused f16 run (GradScaler's defaults) with the f32 run.
func CheckAMP(t *testing.T, c AMPCase) {
	t.Helper()
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dev, base := devices(t)
	var init map[string][]float64
	train := func(dev runtime.Device, p *dsl.AMP, fuse bool) *result {
		t.Helper()
		m, err := c.Build(p).Build()
		if err != nil {
			t.Fatal(err)
		}
		s := session(t, dev, m, fuse, c.Rows)
		defer s.Close()
		if init == nil {
			init = map[string][]float64{}
			for _, n := range s.Names("param") {
				init[n] = read(t, s, "param", n)
			}
		}
		for n, v := range init {
			i, err := s.Lookup("param", n)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.WriteFloats(i, v); err != nil {
				t.Fatal(err)
			}
		}
		r := run(t, s, c.Case)
		if sc := s.LossScale(); sc != 1 {
			// The gradients read back are the scaled loss's.
			for _, g := range r.Grads {
				for i := range g {
					g[i] /= sc
				}
			}
		}
		return r
	}
	bf16, f16 := &dsl.AMP{Type: dsl.BF16}, &dsl.AMP{Type: dsl.F16}
	f32 := train(dev, nil, true)
	fused, unfused, baseline := train(dev, bf16, true), train(dev, bf16, false), train(base, bf16, true)
	half := train(dev, f16, true)
	m, err := c.Build(bf16).Build()
	if err != nil {
		t.Fatal(err)
	}
	want, err := torch(c.Case, m, init)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		what      string
		got, want *result
		tol       AMPTol
	}{
		{"fused vs torch.autocast", fused, want, c.Tol},
		{"-fuse=none vs torch.autocast", unfused, want, c.Tol},
		{"baseline forms vs torch.autocast", baseline, want, c.Tol},
		{"fused vs -fuse=none", fused, unfused, c.Tol},
		{"fused bf16 vs ngen f32", fused, f32, c.F32Tol},
		{"fused f16 vs ngen f32", half, f32, c.F32Tol},
	} {
		compareAMP(t, r.what, c.Case, r.got, r.want, init, r.tol)
	}
}

// compareAMP compares two runs at tol (AMPCase) and logs the worst of
// each kind, so that -v shows what the tolerances are measured against.
func compareAMP(t *testing.T, what string, c Case, got, want *result, init map[string][]float64, tol AMPTol) {
	t.Helper()
	var worstV, worstU float64
	values := func(name string, g, w []float64) {
		t.Helper()
		if len(g) != len(w) {
			t.Errorf("%s: %s: %d values, want %d", what, name, len(g), len(w))
			return
		}
		top := 0.0
		for _, x := range w {
			top = max(top, math.Abs(x))
		}
		for i := range w {
			d := math.Abs(g[i] - w[i])
			if top > 0 {
				worstV = max(worstV, d/top)
			}
			if !(d <= tol.Values*top) {
				t.Errorf("%s: %s[%d] = %v, want %v (within %g of the largest, %g)", what, name, i, g[i], w[i], tol.Values, top)
				return
			}
		}
	}
	for _, f := range forward(c.Kind, got, want) {
		values(f.name, f.got, f.want)
	}
	for i := range want.Loss {
		if d := math.Abs(got.Loss[i] - want.Loss[i]); !(d <= tol.Loss*math.Abs(want.Loss[i])) {
			t.Errorf("%s: loss %d = %v, want %v (within %g)", what, i+1, got.Loss[i], want.Loss[i], tol.Loss)
		}
	}
	for n, w := range want.Grads {
		values("step 1 gradient "+n, got.Grads[n], w)
	}
	for n, w := range want.Params {
		var diff, moved float64
		for i, x := range w {
			diff += (got.Params[n][i] - x) * (got.Params[n][i] - x)
			moved += (x - init[n][i]) * (x - init[n][i])
		}
		if moved > 0 {
			worstU = max(worstU, math.Sqrt(diff/moved))
		}
		if !(diff <= tol.Update*tol.Update*moved) {
			t.Errorf("%s: %s after %d steps: |got - want| = %.3g, %.3g of the update %.3g (tolerance %g)", what, n, c.Steps, math.Sqrt(diff), math.Sqrt(diff/moved), math.Sqrt(moved), tol.Update)
		}
	}
	t.Logf("%s: values within %.3g of their largest, updates within %.3g of their norm", what, worstV, worstU)
}
