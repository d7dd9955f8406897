package jit

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// f16Run is one f16 training run: each step's loss, scale and verdict,
// the scaled gradients of the first step not skipped, and the final
// parameters.
type f16Run struct {
	loss, scales []float64
	skipped      []bool
	grads        map[string][]float64
	params       map[string][]float64
	init         map[string]tensorJSON
}

// f16Steps runs steps training steps of s on (x, y), recording what
// f16Run holds from step from on (1-based).
func f16Steps(t *testing.T, s *runtime.Session, x []float32, y []int32, rows, steps int, r *f16Run) {
	t.Helper()
	for step := 1; step <= steps; step++ {
		if err := s.WriteInput("x", x, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteInput("y", y, rows); err != nil {
			t.Fatal(err)
		}
		r.scales = append(r.scales, s.LossScale())
		before, sched := s.Steps(), s.ScheduleSteps()
		if err := s.Run("step", rows); err != nil {
			t.Fatalf("step %d: %v", len(r.scales), err) // a skipped step is not an error
		}
		l, err := s.StepLoss()
		if err != nil {
			t.Fatal(err)
		}
		r.loss = append(r.loss, l)
		r.skipped = append(r.skipped, s.StepSkipped())
		if want := before + 1; s.StepSkipped() {
			want = before
			if s.Steps() != want {
				t.Fatalf("step %d was skipped, yet the step counter moved from %d to %d", len(r.scales), before, s.Steps())
			}
		} else if s.Steps() != want {
			t.Fatalf("step %d: counter %d, want %d", len(r.scales), s.Steps(), want)
		}
		// The schedule steps after every update, skipped or not.
		if s.ScheduleSteps() != sched+1 {
			t.Fatalf("step %d: the schedule's counter moved from %d to %d, want %d", len(r.scales), sched, s.ScheduleSteps(), sched+1)
		}
		if !s.StepSkipped() && r.grads == nil {
			r.grads = map[string][]float64{}
			for _, n := range s.Names("grad") {
				r.grads[n] = readNamed(t, s, "grad", n)
			}
		}
	}
}

func readParams(t *testing.T, s *runtime.Session) map[string][]float64 {
	out := map[string][]float64{}
	for _, n := range s.Names("param") {
		out[n] = readNamed(t, s, "param", n)
	}
	return out
}

// TestAMPF16Oracle trains the MLP under f16 mixed precision with dynamic
// loss scaling, fused and with -fuse=none (bit for bit the same: every
// loss, scale, verdict, gradient and parameter), and against PyTorch 1.13
// emulating CPU autocast in float16 and GradScaler (testdata/oracle/
// torch_mlp.py: 1.13 has neither on the CPU). Two recipes:
//   - "overflow": SGD with momentum from an initial scale of 2^40, so the
//     scaled gradients overflow f16 and the first steps are skipped while
//     the scale backs off; then training goes on, the scale grows every
//     3 finite steps and the next overflow backs it off again. A
//     checkpoint saved mid-run (after skips, with the growth tracker
//     part way) and loaded into a fresh session continues bit for bit
//     as the uninterrupted run.
//   - "clip": SGD with clip_grad_norm_ under GradScaler's defaults: the
//     norm is the unscaled gradients' (scaler.unscale_ before clipping;
//     SGD, not Adam, whose step hardly depends on the gradients' scale).
//   - "schedule": "overflow"'s skips under Adam and StepLR, with the
//     checkpoint: a skipped step advances the schedule (the loop calls
//     scheduler.step() after a skipped scaler.step) and not Adam's step
//     count (its bias correction), so counting either the other way
//     changes the rate or the first update of every parameter many times
//     over.
func TestAMPF16Oracle(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows, seed = 16, 11
	x, xs, y := mlpBatch(rows, 41, 42)
	for _, c := range []struct {
		name  string
		opt   ir.Optimizer
		sc    ir.LossScaler
		steps int
		ckpt  int // save after this step and resume (0: no checkpoint)
	}{
		{"overflow", ir.Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.9}, ir.LossScaler{Init: 0x1p40, Growth: 2, Backoff: 0.5, Interval: 3}, 40, 27},
		{"clip", ir.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9, ClipNorm: 0.5}, ir.LossScaler{Init: 65536, Growth: 2, Backoff: 0.5, Interval: 2000}, 4, 0},
		{"schedule", ir.Optimizer{Kind: "adam", LR: 0.01, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Schedule: &schedule.Schedule{Kind: "step", StepSize: 6, Gamma: 0.5}}, ir.LossScaler{Init: 0x1p40, Growth: 2, Backoff: 0.5, Interval: 3}, 40, 27},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, layers := ampMLPModel(c.opt)
			sc := c.sc
			m.Precision = &ir.Precision{Type: ir.F16, Scaler: &sc}
			var ckpt []byte
			train := func(fuse bool) f16Run {
				prog, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
				if err != nil {
					t.Fatal(err)
				}
				s, err := Session(dev, prog, runtime.SessionOptions{MaxBatch: rows, Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				r := f16Run{init: initParams(t, s)}
				if c.ckpt > 0 && fuse {
					f16Steps(t, s, x, y, rows, c.ckpt, &r)
					var buf bytes.Buffer
					if err := s.Save(&buf); err != nil {
						t.Fatal(err)
					}
					ckpt = buf.Bytes()
					f16Steps(t, s, x, y, rows, c.steps-c.ckpt, &r)
				} else {
					f16Steps(t, s, x, y, rows, c.steps, &r)
				}
				for n, g := range r.grads {
					// A bias's gradient is an f16 reduction's result,
					// widened; a Linear weight's is its GEMM's f32
					// result (compiler/f32_weight_grads.go).
					if !strings.HasSuffix(n, ".weight") {
						f16Exact(t, fmt.Sprintf("fuse=%v grad %s", fuse, n), g)
					}
				}
				if err := s.Run("predict", rows); err != nil {
					t.Fatal(err)
				}
				f16Exact(t, fmt.Sprintf("fuse=%v predict output", fuse), readNamed(t, s, "output", "output"))
				r.params = readParams(t, s)
				return r
			}
			fused, unfused := train(true), train(false)
			if !slices.Equal(fused.skipped, unfused.skipped) || !slices.Equal(fused.scales, unfused.scales) {
				t.Errorf("fused vs -fuse=none: skipped %v / %v, scales %v / %v", fused.skipped, unfused.skipped, fused.scales, unfused.scales)
			}
			closeTo(t, "loss fused vs -fuse=none", fused.loss, unfused.loss, 0, 0)
			for n := range fused.params {
				closeTo(t, "grad "+n+" fused vs -fuse=none", fused.grads[n], unfused.grads[n], 0, 0)
				closeTo(t, "param "+n+" fused vs -fuse=none", fused.params[n], unfused.params[n], 0, 0)
			}
			nskip := 0
			for _, k := range fused.skipped {
				if k {
					nskip++
				}
			}
			if c.ckpt > 0 && (nskip < 5 || nskip > c.steps-10) {
				t.Errorf("%d of %d steps skipped (%v): want several, and training after them", nskip, c.steps, fused.skipped)
			}

			if ckpt != nil {
				// Resume from the checkpoint in a fresh session: the
				// rest of the run, bit for bit.
				prog, err := compiler.Compile(m, compiler.Options{Fuse: true})
				if err != nil {
					t.Fatal(err)
				}
				s, err := Session(dev, prog, runtime.SessionOptions{MaxBatch: rows, Seed: seed + 1})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				if err := s.Load(bytes.NewReader(ckpt)); err != nil {
					t.Fatal(err)
				}
				if got, want := s.LossScale(), fused.scales[c.ckpt]; got != want {
					t.Errorf("loaded scale %g, want %g", got, want)
				}
				// ngen.schedule_step: the skipped steps count for the
				// schedule, ngen.step does not hold them.
				if s.ScheduleSteps() != c.ckpt {
					t.Errorf("loaded schedule counter %d, want %d (step counter %d)", s.ScheduleSteps(), c.ckpt, s.Steps())
				}
				var r f16Run
				f16Steps(t, s, x, y, rows, c.steps-c.ckpt, &r)
				if !slices.Equal(r.scales, fused.scales[c.ckpt:]) || !slices.Equal(r.skipped, fused.skipped[c.ckpt:]) {
					t.Errorf("resumed: scales %v skipped %v, want %v %v", r.scales, r.skipped, fused.scales[c.ckpt:], fused.skipped[c.ckpt:])
				}
				closeTo(t, "loss resumed", r.loss, fused.loss[c.ckpt:], 0, 0)
				for n, p := range readParams(t, s) {
					closeTo(t, "param "+n+" resumed", p, fused.params[n], 0, 0)
				}
			}

			req := mlpRequest{DType: "f32", Layers: layers, Params: fused.init,
				X: tensorJSON{Shape: []int{rows, mlpWidths[0]}, Data: xs}, Y: y, Steps: c.steps, Opt: c.opt, AMP: "f16",
				Scaler: &scalerJSON{InitScale: sc.Init, GrowthFactor: sc.Growth, BackoffFactor: sc.Backoff, GrowthInterval: sc.Interval}}
			want, err := runTorchMLP(req)
			if err != nil {
				t.Fatal(err)
			}
			// The scale and the verdicts are exact: an overflow is
			// decided by a factor 2 of the scale, far from rounding.
			if !slices.Equal(fused.skipped, want.Skipped) || !slices.Equal(fused.scales, want.Scales) {
				t.Errorf("vs GradScaler: skipped %v, want %v; scales %v, want %v", fused.skipped, want.Skipped, fused.scales, want.Scales)
			}
			// f16 keeps 11 significant bits (relative rounding 2^-12);
			// the libraries sum in other orders and a rounding may fall
			// the other way, a few roundings deep: the loss within 0.5%.
			closeTo(t, "loss vs emulated f16 autocast", fused.loss, want.Loss, 5e-3, 0)
			for n := range fused.params {
				// Scaled f16 gradients: 2% of the largest.
				closeTo(t, "grad "+n+" vs emulated f16 autocast", fused.grads[n], want.Grads[n], 0, 0.02*maxAbs(want.Grads[n]))
				var moved float64
				for i, v := range want.Params[n] {
					moved = max(moved, math.Abs(v-fused.init[n].Data[i]))
				}
				// Within 2% of the largest update.
				closeTo(t, "param "+n+" vs emulated f16 autocast", fused.params[n], want.Params[n], 0, 0.02*moved)
			}
		})
	}
}

// scalerJSON is torch_mlp.py's "scaler": GradScaler's arguments.
type scalerJSON struct {
	InitScale      float64 `json:"init_scale"`
	GrowthFactor   float64 `json:"growth_factor"`
	BackoffFactor  float64 `json:"backoff_factor"`
	GrowthInterval int     `json:"growth_interval"`
}

// f16Exact fails unless every value is an IEEE binary16.
func f16Exact(t *testing.T, what string, xs []float64) {
	t.Helper()
	for i, x := range xs {
		if math.IsInf(x, 0) || math.IsNaN(x) {
			continue
		}
		a := math.Abs(x)
		// Normal halves have 11 significant bits; subnormals are
		// multiples of 2^-24.
		_, e := math.Frexp(a)
		q := math.Ldexp(1, max(e-11, -24))
		if a > 65504 || a/q != math.Trunc(a/q) {
			t.Errorf("%s[%d] = %g is not a float16", what, i, x)
			return
		}
	}
}

// TestAMPF16Accumulate: with gradient accumulation the scaler's verdict
// is the update's, as GradScaler checks at scaler.step: a micro-batch
// whose gradients overflow is no error, the update it belongs to is
// skipped whole (nothing changes, the counter stays) and backs the
// scale off once.
func TestAMPF16Accumulate(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows = 8
	x, _, y := mlpBatch(rows, 5, 6)
	m, _ := ampMLPModel(ir.Optimizer{Kind: "sgd", LR: 0.1})
	m.Precision = &ir.Precision{Type: ir.F16, Scaler: &ir.LossScaler{Init: 0x1p40, Growth: 2, Backoff: 0x1p-30, Interval: 100}}
	prog, err := compiler.Compile(m, compiler.Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Session(dev, prog, runtime.SessionOptions{MaxBatch: rows, Seed: 3, AccumulationSteps: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p0 := readParams(t, s)
	run := func() {
		t.Helper()
		for range 2 {
			if err := s.WriteInput("x", x, rows); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteInput("y", y, rows); err != nil {
				t.Fatal(err)
			}
			if err := s.Run("step", rows); err != nil {
				t.Fatal(err)
			}
		}
	}
	run() // 2^40 overflows f16: skipped, the scale to 2^10
	if !s.StepSkipped() || s.Steps() != 0 || s.LossScale() != 0x1p10 || s.Pending() != 0 {
		t.Fatalf("after an overflowing update: skipped %v, steps %d, scale %g, pending %d", s.StepSkipped(), s.Steps(), s.LossScale(), s.Pending())
	}
	for n, p := range readParams(t, s) {
		closeTo(t, "param "+n+" after a skipped update", p, p0[n], 0, 0)
	}
	run() // 2^10 does not
	if s.StepSkipped() || s.Steps() != 1 || s.LossScale() != 0x1p10 {
		t.Fatalf("after a finite update: skipped %v, steps %d, scale %g", s.StepSkipped(), s.Steps(), s.LossScale())
	}
	if st, _ := s.Scaler(); st.Skipped != 1 || st.GrowthTracker != 1 {
		t.Errorf("scaler %+v: want 1 skipped, tracker 1", st)
	}
}
