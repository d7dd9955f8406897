package runtime_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/codegen/jit"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/generated/mlp_fp16"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// clockModel is a generated MLP (f32 or fp16 with loss scaling) behind
// one interface.
type clockModel interface {
	Session() *runtime.Session
	Step(x []float32, y []int32) (float32, error)
	Close() error
}

func openClockModel(t *testing.T, dev runtime.Device, fp16 bool, accumulate int) clockModel {
	t.Helper()
	var m clockModel
	var err error
	if fp16 {
		m, err = mlp_fp16.New(dev, mlp_fp16.Options{Batch: 16, Seed: 3, AccumulationSteps: accumulate})
	} else {
		m, err = mlp.New(dev, mlp.Options{Batch: 16, Seed: 3, AccumulationSteps: accumulate})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// f64Model is a small f64 dropout MLP with Adam, compiled here: the
// clock's update bound over doubles (the generated packages are f32).
type f64Model struct {
	s *runtime.Session
}

func openF64Model(t *testing.T, dev runtime.Device, accumulate int) clockModel {
	t.Helper()
	opt := ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 1e-4}
	p, err := compiler.Compile(irtest.DeepMLP(ir.F64, 784, 32, 2, 10, 0.2, opt, 0), compiler.Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := jit.Session(dev, p, runtime.SessionOptions{MaxBatch: 16, Seed: 3, AccumulationSteps: accumulate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return f64Model{s}
}

func (m f64Model) Session() *runtime.Session { return m.s }
func (m f64Model) Close() error              { return m.s.Close() }
func (m f64Model) Step(x []float32, y []int32) (float32, error) {
	x64 := make([]float64, len(x))
	for i, v := range x {
		x64[i] = float64(v)
	}
	if err := m.s.WriteInput("x", x64, len(y)); err != nil {
		return 0, err
	}
	if err := m.s.WriteInput("y", y, len(y)); err != nil {
		return 0, err
	}
	if err := m.s.Run("step", len(y)); err != nil {
		return 0, err
	}
	l, err := m.s.StepLoss()
	return float32(l), err
}

func clockBatch(r *rand.Rand, bad bool) ([]float32, []int32) {
	x, y := make([]float32, 16*784), make([]int32, 16)
	for i := range x {
		x[i] = r.Float32()
	}
	if bad {
		x[5] = float32(math.Inf(1))
	}
	for i := range y {
		y[i] = int32(r.IntN(10))
	}
	return x, y
}

// checkClock compares the device clock with the host's mirrors and the
// host's reference computation of the next step's scalars (ClockRef).
func checkClock(t *testing.T, s *runtime.Session, what string) []float64 {
	t.Helper()
	clk, err := s.ReadClock()
	if err != nil {
		t.Fatal(err)
	}
	if clk == nil {
		t.Fatal("the plan has no clock: regenerate it")
	}
	if int(clk[runtime.ClockT]) != s.Steps() || int(clk[runtime.ClockU]) != s.ScheduleSteps() {
		t.Fatalf("%s: clock t %v u %v, host %d %d", what, clk[runtime.ClockT], clk[runtime.ClockU], s.Steps(), s.ScheduleSteps())
	}
	if sc, ok := s.Scaler(); ok && (clk[runtime.ClockScale] != sc.Scale || int(clk[runtime.ClockTracker]) != sc.GrowthTracker) {
		t.Fatalf("%s: clock scale %v tracker %v, host %v %d", what, clk[runtime.ClockScale], clk[runtime.ClockTracker], sc.Scale, sc.GrowthTracker)
	}
	o := s.Plan().Optimizer
	ref := runtime.ClockRef(s, clk)
	for name, want := range ref {
		i := runtime.ClockSlot(o, name)
		if i < 0 {
			t.Fatalf("%s: the clock has no slot for %s", what, name)
		}
		got := clk[i]
		// C's pow and cos against Go's: a few ulps. gsafe, the counters
		// and the scale are exact.
		tol := 1e-13 * math.Abs(want)
		if name == "gsafe" || name == "step" || name == runtime.LossScaleScalar || name == runtime.InvScaleScalar {
			tol = 0
		}
		if !(math.Abs(got-want) <= tol) {
			t.Fatalf("%s: %s is %v on the device, %v on the host", what, name, got, want)
		}
	}
	if _, ok := ref["gsafe"]; !ok {
		t.Fatalf("%s: the plan has no update check", what)
	}
	if lr := clk[runtime.ClockSlot(o, "lr")]; math.Abs(lr-s.LR()) > 1e-13*s.LR() {
		t.Fatalf("%s: clock lr %v, LR() %v", what, lr, s.LR())
	}
	return clk
}

// TestClockMatchesHost trains the seed MLP (Adam, dropout, clipping) under
// a warm-up and cosine schedule, and the fp16 MLP under loss scaling with
// planted infinities, and after New, each step, SetLR, SetSchedule,
// SetWeightDecay, a skipped step and a checkpoint's Load (and with
// gradient accumulation, where the update check checks every element),
// compares the
// device clock with the host: the counters and scaler with its mirrors,
// the next step's scalars with Optimizer.ScalarsAt (schedule.Rate in
// float64), gsafe and the bound after each good step with the host's
// reference (bound_ref_test.go) exactly.
func TestClockMatchesHost(t *testing.T) {
	for _, c := range []struct {
		fp16, f64  bool
		accumulate int
	}{{false, false, 1}, {true, false, 1}, {false, false, 2}, {false, true, 1}} {
		fp16 := c.fp16
		t.Run(fmt.Sprintf("fp16=%v,f64=%v,accumulate=%d", fp16, c.f64, c.accumulate), func(t *testing.T) {
			dev, err := cpu.New(cpu.Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Close()
			open := func() clockModel {
				if c.f64 {
					return openF64Model(t, dev, c.accumulate)
				}
				return openClockModel(t, dev, fp16, c.accumulate)
			}
			m := open()
			s := m.Session()
			checkClock(t, s, "after New")
			if err := s.SetSchedule(2e-3, &schedule.Schedule{Kind: "warmup_cosine", Iters: 4, Total: 14, Min: 1e-4, StartFactor: 0.25}); err != nil {
				t.Fatal(err)
			}
			if s.Plan().Optimizer.GradNorm() {
				if err := s.SetClipNorm(0.5); err != nil {
					t.Fatal(err)
				}
			}
			r := rand.New(rand.NewPCG(7, 8))
			full, skipped := 0, 0
			for step := range 20 {
				before := checkClock(t, s, fmt.Sprintf("before step %d", step))
				bad := fp16 && step%7 == 3
				if _, err := m.Step(clockBatch(r, bad)); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				switch {
				case step%c.accumulate != c.accumulate-1:
					continue // a micro-batch: no update
				case s.StepSkipped():
					skipped++
				default:
					if s.UpdateCheckFull() {
						full++
					}
					after, err := s.ReadClock()
					if err != nil {
						t.Fatal(err)
					}
					want := runtime.BoundAfterRef(s, before)
					if got := [3]float64(after[runtime.ClockBound : runtime.ClockBound+3]); got != want {
						t.Fatalf("step %d: the device's bound %v, the host's reference %v", step, got, want)
					}
				}
				switch step {
				case 5:
					if err := s.SetLR(5e-4); err != nil {
						t.Fatal(err)
					}
				case 9:
					if err := s.SetWeightDecay(0.01); err != nil {
						t.Fatal(err)
					}
					if err := s.SetSchedule(1e-3, &schedule.Schedule{Kind: "multistep", Milestones: []int{12, 15}, Gamma: 0.5}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if fp16 && skipped == 0 {
				t.Fatal("no step was skipped")
			}
			if c.accumulate > 1 && full != 20/c.accumulate {
				t.Fatalf("%d of %d accumulated updates were checked element by element, want all", full, 20/c.accumulate)
			}
			clk := checkClock(t, s, "after the steps")
			// A checkpoint carries the counters, rate, schedule, decay and
			// scaler; the resumed session's clock computes the same next
			// step (but for the bound, which Load takes afresh).
			var buf bytes.Buffer
			if err := s.Save(&buf); err != nil {
				t.Fatal(err)
			}
			m2 := open()
			if err := m2.Session().Load(bytes.NewReader(buf.Bytes())); err != nil {
				t.Fatal(err)
			}
			clk2 := checkClock(t, m2.Session(), "after Load")
			for i := range runtime.ClockBound {
				// ClockBoundOff follows the update about to run: the host
				// rewrites it before an accumulated one.
				if clk2[i] != clk[i] && i != runtime.ClockBoundOff {
					t.Fatalf("clock word %d: %v after Load, %v saved", i, clk2[i], clk[i])
				}
			}
			t.Logf("%d steps skipped, %d checked element by element", skipped, full)
		})
	}
}

// recorder is a CPU device that records each launch's kernel, shape and
// arguments.
type recorder struct {
	*cpu.Device
	launches []string
}

func (d *recorder) Launch(f runtime.Function, grid, block runtime.Dim3, shared int, args ...runtime.Arg) error {
	d.launches = append(d.launches, fmt.Sprintf("%v %v %v %d %v", f, grid, block, shared, args))
	return d.Device.Launch(f, grid, block, shared, args...)
}

// TestStepArgsConstant: every launch of a training step has the same
// arguments at every step, under a schedule, with clipping, dropout and
// loss scaling, while the rate, Adam's bias corrections and dropout's
// step change: what a CUDA graph replays needs no kernel-argument update
// (runtime/cuda's replay counts them; TestGraphsMatchEager wants none).
func TestStepArgsConstant(t *testing.T) {
	for _, fp16 := range []bool{false, true} {
		t.Run(fmt.Sprintf("fp16=%v", fp16), func(t *testing.T) {
			base, err := cpu.New(cpu.Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer base.Close()
			rec := &recorder{Device: base}
			m := openClockModel(t, rec, fp16, 1)
			s := m.Session()
			if err := s.SetSchedule(1e-3, &schedule.Schedule{Kind: "onecycle", Total: 10, PctStart: 0.3, DivFactor: 25, FinalDivFactor: 1e4}); err != nil {
				t.Fatal(err)
			}
			if s.Plan().Optimizer.GradNorm() {
				if err := s.SetClipNorm(1); err != nil {
					t.Fatal(err)
				}
			}
			r := rand.New(rand.NewPCG(1, 2))
			var steps [][]string
			var lrs []float64
			for step := range 6 {
				lrs = append(lrs, s.LR())
				n := len(rec.launches)
				if _, err := m.Step(clockBatch(r, false)); err != nil {
					t.Fatal(err)
				}
				if step == 0 {
					continue // the first step runs the clock kernel once more, to write SetSchedule's rate
				}
				steps = append(steps, rec.launches[n:])
			}
			if lrs[1] == lrs[2] || lrs[2] == lrs[3] {
				t.Fatalf("rates %v: the schedule does not change the rate", lrs)
			}
			for i := 1; i < len(steps); i++ {
				if len(steps[i]) != len(steps[0]) {
					t.Fatalf("step %d launched %d kernels, step 1 %d", i+1, len(steps[i]), len(steps[0]))
				}
				for j := range steps[i] {
					if steps[i][j] != steps[0][j] {
						t.Fatalf("step %d, launch %d: %s; step 1: %s", i+1, j, steps[i][j], steps[0][j])
					}
				}
			}
		})
	}
}

// TestClockSchedules holds the clock kernel's C port of schedule.Rate to
// the Go one (which runtime/schedule's TestRatesMatchTorch holds to
// torch.optim.lr_scheduler at 1e-7) for 2,000 steps of every kind, with
// Adam's bias corrections at an optimizer step behind the schedule's (a
// loss scaler's skips): every scalar of the next step within 1e-11
// relative (C's cos and pow against Go's differ by ulps, which the
// cosine's 1+cos near its end magnifies to 1e-13), far inside the 1e-7
// the schedules promise against PyTorch.
func TestClockSchedules(t *testing.T) {
	cases := []schedule.Schedule{
		{Kind: "step", StepSize: 300, Gamma: 0.5},
		{Kind: "multistep", Milestones: []int{100, 700, 1500}, Gamma: 0.3},
		{Kind: "exponential", Gamma: 0.998},
		{Kind: "constant", Factor: 0.25, Iters: 120},
		{Kind: "linear", StartFactor: 0.01, EndFactor: 1, Iters: 250},
		{Kind: "linear", StartFactor: 1, EndFactor: 0.1, Iters: 1800},
		{Kind: "cosine", TMax: 700, Min: 1e-5},
		{Kind: "cosine", TMax: 2000},
		{Kind: "warmup_cosine", Iters: 200, Total: 1900, Min: 3e-5, StartFactor: 0.001},
		{Kind: "warmup_cosine", Total: 2000, Min: 3e-5, StartFactor: 1},
		{Kind: "onecycle", Total: 1900, PctStart: 0.3, DivFactor: 25, FinalDivFactor: 1e4},
		{Kind: "onecycle", Total: 2000, PctStart: 0.25, DivFactor: 10, FinalDivFactor: 100, Linear: true, ThreePhase: true},
	}
	const steps = 2000
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	s := openClockModel(t, dev, false, 1).Session()
	o := s.Plan().Optimizer
	rules := o.Rules()
	for _, sc := range cases {
		if err := s.SetSchedule(3e-4, &sc); err != nil {
			t.Fatal(err)
		}
		for u := 0; u < steps; u++ {
			step := max(u-u/50, 0) // one skipped update in 50
			runtime.SetCounters(s, step, u)
			clk, err := s.ReadClock()
			if err != nil {
				t.Fatal(err)
			}
			want := o.ScalarsAt(map[string]float64{}, rules, step+1, u+1, 3e-4, &sc, s.WeightDecay())
			for name, w := range want {
				got := clk[runtime.ClockSlot(o, name)]
				if !(math.Abs(got-w) <= 1e-11*math.Abs(w)) {
					t.Fatalf("%s, update %d (step %d): %s is %v on the device, %v in Go", sc.String(), u+1, step+1, name, got, w)
				}
			}
		}
	}
}
