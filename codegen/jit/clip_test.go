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
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestClipValueHugeGradient: the input that makes TestUpdateCheck's
// update overflow (gradients near 1e36 in f32, 1e305 in f64) trains when
// the optimizer clips gradient values: the update check and its bound
// read the clamped gradient, so the step succeeds without an element-by-
// element check, and plain SGD moves each parameter by lr·clamp(g), at
// most lr·c and exactly that where the gradient was clamped. f32 and f64,
// fused and unfused.
func TestClipValueHugeGradient(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const lr, c = 0.1, 0.5
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		for _, opt := range []ir.Optimizer{
			{Kind: "sgd", LR: lr, ClipValue: c},
			{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipValue: c},
			{Kind: "sgd", LR: lr, Momentum: 0.9, ClipValue: c},
		} {
			for _, fuse := range []bool{true, false} {
				what := fmt.Sprintf("%s/%s/fuse=%v", dt, opt.Kind, fuse)
				p, err := compiler.Compile(irtest.MLP(dt, 4, 5, 3, 0, opt), compiler.Options{Fuse: fuse})
				if err != nil {
					t.Fatal(err)
				}
				s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 2, Seed: 3})
				if err != nil {
					t.Fatal(err)
				}
				huge := 1e36
				if dt == ir.F64 {
					huge = 1e305
				}
				if err := s.WriteInput("x", castTo(dt, []float64{huge, 0, 0, 0, huge, 0, 0, 0}), 2); err != nil {
					t.Fatal(err)
				}
				if err := s.WriteInput("y", []int32{0, 2}, 2); err != nil {
					t.Fatal(err)
				}
				before := snapshot(t, s)
				if err := s.Run("step", 2); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if s.UpdateCheckFull() {
					t.Errorf("%s: the clamped update was checked element by element: the bound covers every clamped gradient", what)
				}
				after := snapshot(t, s)
				finiteSnapshot(t, what, after)
				if opt.Kind == "sgd" && opt.Momentum == 0 {
					gi, _ := s.Lookup("grad", "fc1.weight")
					g, err := s.ReadFloats(gi)
					if err != nil {
						t.Fatal(err)
					}
					w0, w1 := before["param:fc1.weight"], after["param:fc1.weight"]
					clamped := 0
					for i := range g {
						want := w0[i] - lr*math.Max(-c, math.Min(c, g[i]))
						// One rounding of the update, f32 or f64: rtol 1e-6.
						if math.Abs(w1[i]-want) > 1e-6*math.Max(1, math.Abs(want)) {
							t.Fatalf("%s: fc1.weight[%d] = %v, want %v (gradient %v)", what, i, w1[i], want, g[i])
						}
						if math.Abs(g[i]) > c {
							clamped++
						}
					}
					if clamped == 0 {
						t.Fatalf("%s: no gradient above the clip bound: the test tests nothing", what)
					}
				}
				s.Close()
			}
		}
	}
}

// TestClipNormNotFinite: f64 gradients near 1e160 are finite, but the
// sum of their squares is not: the step fails with the norm named and
// changes nothing, and an ordinary step trains after it.
func TestClipNormNotFinite(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, fuse := range []bool{true, false} {
		p, err := compiler.Compile(irtest.MLP(ir.F64, 4, 5, 3, 0, ir.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9, ClipNorm: 1}), compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 2, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		run := func(v float64) error {
			if err := s.WriteInput("x", []float64{v, 0, 0, 0, v, 0, 0, 0}, 2); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteInput("y", []int32{0, 2}, 2); err != nil {
				t.Fatal(err)
			}
			return s.Run("step", 2)
		}
		if err := run(1); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, s)
		err = run(1e160)
		if err == nil || !strings.Contains(err.Error(), "global norm (ClipGradNorm) is not finite at step 2; the step changed nothing") {
			t.Fatalf("fuse=%v: err = %v, want the norm's failure", fuse, err)
		}
		sameSnapshot(t, fmt.Sprintf("fuse=%v", fuse), snapshot(t, s), before)
		if err := run(1); err != nil {
			t.Fatalf("fuse=%v: the step after: %v", fuse, err)
		}
		if s.Steps() != 2 {
			t.Fatalf("fuse=%v: %d steps, want 2", fuse, s.Steps())
		}
		s.Close()
	}
}

// TestClipNormAccumulated: with two accumulated micro-batches the norm is
// the summed (mean) gradient's, as for the whole batch at once: the two
// runs end equal to f32 rounding, and both differ from an unclipped run.
func TestClipNormAccumulated(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows = 8
	x := make([]float32, rows*4)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	y := []int32{0, 1, 2, 0, 1, 2, 0, 1}
	train := func(clip float64, micro int) map[string][]float64 {
		p, err := compiler.Compile(irtest.MLP(ir.F32, 4, 5, 3, 0, ir.Optimizer{Kind: "sgd", LR: 0.5, ClipNorm: clip}), compiler.Options{Fuse: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: rows / micro, Seed: 3, AccumulationSteps: micro})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		b := rows / micro
		for m := range micro {
			if err := s.WriteInput("x", x[m*b*4:(m+1)*b*4], b); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteInput("y", y[m*b:(m+1)*b], b); err != nil {
				t.Fatal(err)
			}
			if err := s.Run("step", b); err != nil {
				t.Fatal(err)
			}
		}
		if s.Steps() != 1 {
			t.Fatalf("%d steps after %d micro-batches, want 1", s.Steps(), micro)
		}
		return snapshot(t, s)
	}
	whole, acc, plain := train(0.05, 1), train(0.05, 2), train(0, 1)
	for k, w := range whole {
		// f32: the mean of two half-batch sums against one sum: rtol 1e-5.
		closeTo(t, "accumulated "+k, acc[k], w, 1e-5, 1e-7)
	}
	if slices.Equal(whole["param:fc1.weight"], plain["param:fc1.weight"]) {
		t.Fatal("clipping at 0.05 changed nothing: the gradients' norm is below it")
	}
}

// TestClipNormFused: clipping by norm adds one launch to a fused step,
// the grad-norm kernel, and no pass over the parameters or gradients:
// the scale runs inside the update kernel. Clipping by value adds none.
func TestClipNormFused(t *testing.T) {
	launches := func(o ir.Optimizer) (n int, hasNorm bool) {
		p, err := compiler.Compile(irtest.MLP(ir.F32, 4, 5, 3, 0, o), compiler.Options{Fuse: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range p.Plan.Funcs {
			if f.Name != "step" {
				continue
			}
			for _, st := range f.Steps {
				n++
				hasNorm = hasNorm || st.Builtin == runtime.GradNormKernel
			}
		}
		return n, hasNorm
	}
	base, _ := launches(irtest.Adam)
	o := irtest.Adam
	o.ClipNorm = 1
	if n, ok := launches(o); n != base+1 || !ok {
		t.Errorf("ClipGradNorm: %d steps (grad-norm kernel %v), want %d + the grad-norm kernel", n, ok, base)
	}
	o = irtest.Adam
	o.ClipValue = 1
	if n, _ := launches(o); n != base {
		t.Errorf("ClipGradValue: %d steps, want %d", n, base)
	}
}

// TestClipNormCoefficient checks the grad-norm kernel's coefficient on a
// model large enough for several blocks: plain SGD moves every parameter
// by lr·coef·g, with coef = maxNorm / (‖g‖ + 1e-6) from the host's own sum
// over the gradient the step read. f32 and f64.
func TestClipNormCoefficient(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const in, hidden, rows, lr, maxNorm = 64, 200, 6, 0.5, 0.05
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		p, err := compiler.Compile(irtest.MLP(dt, in, hidden, 3, 0, ir.Optimizer{Kind: "sgd", LR: lr, ClipNorm: maxNorm}), compiler.Options{Fuse: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: rows, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range s.Plan().Funcs {
			for _, st := range f.Steps {
				if st.Builtin == runtime.GradNormKernel {
					if b := st.Grid[0].Eval(map[string]int{"B": rows}); b < 2 {
						t.Fatalf("%s: the grad-norm kernel runs %d block(s); the test wants several", dt, b)
					}
				}
			}
		}
		xs := make([]float64, rows*in)
		for i := range xs {
			xs[i] = float64(i%11) - 5
		}
		if err := s.WriteInput("x", castTo(dt, xs), rows); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteInput("y", []int32{0, 1, 2, 0, 1, 2}, rows); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, s)
		if err := s.Run("step", rows); err != nil {
			t.Fatal(err)
		}
		after := snapshot(t, s)
		grads := map[string][]float64{}
		sum := 0.0
		for _, n := range s.Names("grad") {
			grads[n] = readNamed(t, s, "grad", n)
			for _, g := range grads[n] {
				sum += g * g
			}
		}
		coef := math.Min(maxNorm/(math.Sqrt(sum)+1e-6), 1)
		if coef > 0.5 {
			t.Fatalf("%s: coefficient %g: the norm %g hardly exceeds the max norm; the test wants clipping", dt, coef, math.Sqrt(sum))
		}
		// f32: coef and the update each round once, and the host's sum
		// runs in another order: rtol 1e-5. f64: rtol 1e-12.
		rtol := 1e-5
		if dt == ir.F64 {
			rtol = 1e-12
		}
		for n, g := range grads {
			want := make([]float64, len(g))
			for i := range g {
				want[i] = before["param:"+n][i] - lr*coef*g[i]
			}
			closeTo(t, fmt.Sprintf("%s %s", dt, n), after["param:"+n], want, rtol, 1e-9)
		}
		// The partial sums are scratch: a checkpoint leaves them out and
		// loads into a fresh session.
		var buf bytes.Buffer
		if err := s.Save(&buf); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(buf.String(), "clip.partials") {
			t.Fatalf("%s: the checkpoint holds the grad-norm partials", dt)
		}
		f, err := Session(dev, p, runtime.SessionOptions{MaxBatch: rows, Seed: 6})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Load(&buf); err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
		f.Close()
		s.Close()
	}
}

// TestClipNormRunTime: the max norm is run-time data. A model compiled
// with clipping off (ClipNormOff, dsl.ClipGradNorm(+Inf)) trains bit for
// bit as one without the kernel, since the coefficient is exactly 1; set
// at run time the norm clips, f64 gradients beyond 1e154 cannot fail an
// unclipped step, checkpoints carry the norm, and every bad value, or a
// model without the kernel, is an error that says so.
func TestClipNormRunTime(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows = 4
	session := func(o ir.Optimizer, dt ir.DType) *runtime.Session {
		p, err := compiler.Compile(irtest.MLP(dt, 4, 5, 3, 0, o), compiler.Options{Fuse: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: rows, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	step := func(s *runtime.Session, v float64) error {
		x := []float64{v, 1, -2, 0.5, 3, v, 0, 1, -1, 2, v, 0, 1, 1, 1, v}
		var in any = x
		if s.Plan().DType == runtime.F32 {
			in = castTo(ir.F32, x)
		}
		if err := s.WriteInput("x", in, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteInput("y", []int32{0, 2, 1, 0}, rows); err != nil {
			t.Fatal(err)
		}
		return s.Run("step", rows)
	}
	off := irtest.Adam
	off.ClipNormOff = true
	plain, s := session(irtest.Adam, ir.F32), session(off, ir.F32)
	defer plain.Close()
	defer s.Close()
	if !math.IsInf(s.ClipNorm(), 1) || !math.IsInf(plain.ClipNorm(), 1) {
		t.Fatalf("max norms %v and %v at the start, want +Inf (off)", s.ClipNorm(), plain.ClipNorm())
	}
	for range 2 {
		if err := step(plain, 3); err != nil {
			t.Fatal(err)
		}
		if err := step(s, 3); err != nil {
			t.Fatal(err)
		}
	}
	sameSnapshot(t, "clipping off against no clipping", snapshot(t, s), snapshot(t, plain))
	// Off, the step does not launch the grad-norm kernel (its step is
	// runtime.WhileClipping); on, it does, once a step.
	gradNormCalls := func(s *runtime.Session) int {
		s.SetProfiling(true)
		defer s.SetProfiling(false)
		if err := step(s, 3); err != nil {
			t.Fatal(err)
		}
		var steps []runtime.Step
		for _, f := range s.Plan().Funcs {
			if f.Name == "step" {
				steps = f.Steps
			}
		}
		n := 0
		for _, p := range s.Profile() {
			if p.Func == "step" && steps[p.Index].Builtin == runtime.GradNormKernel {
				n += p.Calls
			}
		}
		return n
	}
	if n := gradNormCalls(s); n != 0 {
		t.Fatalf("clipping off: the grad-norm kernel ran %d time(s), want none", n)
	}
	if err := step(plain, 3); err != nil {
		t.Fatal(err)
	}
	sameSnapshot(t, "clipping off against no clipping, profiled", snapshot(t, s), snapshot(t, plain))
	for _, v := range []float64{0, -1, math.Inf(-1), math.NaN()} {
		if err := s.SetClipNorm(v); err == nil || !strings.Contains(err.Error(), "want a positive norm") {
			t.Errorf("SetClipNorm(%v): %v, want a refusal", v, err)
		}
	}
	if err := plain.SetClipNorm(1); err == nil || !strings.Contains(err.Error(), "no gradient clipping compiled in: declare Clip: dsl.ClipGradNorm(math.Inf(1))") {
		t.Errorf("SetClipNorm on a model without the kernel: %v", err)
	}
	if err := s.SetClipNorm(0.01); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, plain)
	if err := step(s, 3); err != nil {
		t.Fatal(err)
	}
	if err := step(plain, 3); err != nil {
		t.Fatal(err)
	}
	if slices.Equal(snapshot(t, s)["state:adam.exp_avg"], snapshot(t, plain)["state:adam.exp_avg"]) {
		t.Fatalf("max norm 0.01 changed nothing (before: %v)", before["state:adam.exp_avg"][:3])
	}
	if n := gradNormCalls(s); n != 1 {
		t.Fatalf("clipping at 0.01: the grad-norm kernel ran %d time(s) in a step, want 1", n)
	}
	if err := step(plain, 3); err != nil {
		t.Fatal(err)
	}
	// The checkpoint carries the norm; a model without the kernel cannot
	// resume a run that clipped, but takes its weights alone.
	var buf bytes.Buffer
	if err := s.Save(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"ngen.clip_norm":"0.01"`) {
		t.Fatal("the checkpoint lacks ngen.clip_norm 0.01")
	}
	f := session(off, ir.F32)
	defer f.Close()
	if err := f.Load(bytes.NewReader(buf.Bytes())); err != nil || f.ClipNorm() != 0.01 {
		t.Fatalf("loaded max norm %v (%v), want 0.01", f.ClipNorm(), err)
	}
	if err := plain.Load(bytes.NewReader(buf.Bytes())); err == nil || !strings.Contains(err.Error(), "ngen.clip_norm 0.01: the run clipped its gradients") {
		t.Fatalf("resuming a clipped run without the kernel: %v", err)
	}
	if err := s.SetClipNorm(math.Inf(1)); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := s.Save(&buf); err != nil || !strings.Contains(buf.String(), `"ngen.clip_norm":"+Inf"`) {
		t.Fatalf("the checkpoint of an unclipped run: %v", err)
	}
	if err := plain.Load(&buf); err != nil {
		t.Fatalf("a run that did not clip resumes without the kernel: %v", err)
	}
	// Off, the kernel reads no gradient: f64 gradients whose squares
	// overflow train (the guard sees them finite); set, they fail the step.
	off.Kind, off.LR = "sgd", 0.1
	d := session(off, ir.F64)
	defer d.Close()
	if err := d.SetClipNorm(1); err != nil {
		t.Fatal(err)
	}
	if err := step(d, 1e160); err == nil || !strings.Contains(err.Error(), "global norm (ClipGradNorm) is not finite") {
		t.Fatalf("clipping at 1, f64 gradients near 1e160: %v", err)
	}
	if err := d.SetClipNorm(math.Inf(1)); err != nil {
		t.Fatal(err)
	}
	if err := step(d, 1e160); err != nil {
		t.Fatalf("clipping off, f64 gradients near 1e160: %v", err)
	}
}

// TestClipNormSoloBlocks: the CPU backend runs the grad-norm kernel with
// one-thread blocks, each keeping its 256 threads' sums in lanes; its
// coefficient is bit for bit the GPU form's (256-thread blocks, run with
// cpu.Options.GPUBlocks) on the same gradient, one whose last stretch is
// a partial one and one of more than 256 blocks (the last block's
// threads then add several partials each). f32 and f64. One row and two
// classes, so that the other reductions' forms (a bias gradient over the
// batch, cross-entropy's sums) add in the same order and both forms
// compute the same gradient.
func TestClipNormSoloBlocks(t *testing.T) {
	solo, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer solo.Close()
	gpu, err := cpu.New(cpu.Options{GPUBlocks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	const rows, maxNorm = 1, 0.05
	for _, size := range []struct{ in, hidden, minBlocks int }{{64, 200, 2}, {300, 3600, 257}} {
		for _, dt := range []ir.DType{ir.F32, ir.F64} {
			if dt == ir.F64 && size.hidden > 1000 {
				// The GPU-forms device computes this f64 weight gradient
				// in another order (a third of it differs in its last
				// bits), so the two grad-norm kernels would read two
				// gradients.
				continue
			}
			p, err := compiler.Compile(irtest.MLP(dt, size.in, size.hidden, 2, 0, ir.Optimizer{Kind: "sgd", LR: 0.5, ClipNorm: maxNorm}), compiler.Options{Fuse: true})
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("%s %dx%d", dt, size.in, size.hidden)
			// The gradient and the status block after one step.
			run := func(dev runtime.Device) ([]float64, []int32) {
				s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: rows, Seed: 7})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				status, grads := -1, -1
				for i, b := range s.Plan().Buffers {
					if b.Role == "grads" {
						grads = i
						if n := b.Elems.Eval(nil); n%256 == 0 {
							t.Fatalf("%s: %d gradients, a whole number of 256-element stretches", what, n)
						}
					}
				}
				for _, f := range s.Plan().Funcs {
					for _, st := range f.Steps {
						if st.Builtin != runtime.GradNormKernel {
							continue
						}
						status = st.Buf
						if b := st.Grid[0].Eval(map[string]int{"B": rows}); b < size.minBlocks {
							t.Fatalf("%s: the grad-norm kernel runs %d blocks; the test wants at least %d", what, b, size.minBlocks)
						}
					}
				}
				if status < 0 || grads < 0 {
					t.Fatalf("%s: no grad-norm step or gradient vector", what)
				}
				xs := make([]float64, rows*size.in)
				for i := range xs {
					xs[i] = math.Sin(float64(i)) * 3
				}
				if err := s.WriteInput("x", castTo(dt, xs), rows); err != nil {
					t.Fatal(err)
				}
				if err := s.WriteInput("y", []int32{1}, rows); err != nil {
					t.Fatal(err)
				}
				if err := s.Run("step", rows); err != nil {
					t.Fatal(err)
				}
				g, err := s.ReadFloats(grads)
				if err != nil {
					t.Fatal(err)
				}
				sb := make([]int32, s.Elems(status))
				if err := s.Read(status, sb); err != nil {
					t.Fatal(err)
				}
				return g, sb
			}
			g1, s1 := run(gpu)
			g2, s2 := run(solo)
			if !slices.Equal(g1, g2) {
				n, first := 0, -1
				for i := range g1 {
					if g1[i] != g2[i] {
						n++
						if first < 0 {
							first = i
						}
					}
				}
				t.Fatalf("%s: the two forms' steps computed different gradients (%d of %d, first %d)", what, n, len(g1), first)
			}
			w := runtime.StatusClipCoef
			c1, c2 := s1[w:w+2], s2[w:w+2]
			if dt == ir.F32 {
				c1, c2 = c1[:1], c2[:1]
			}
			if !slices.Equal(c1, c2) || c1[0] == 0 {
				t.Errorf("%s: coefficient bits %x with one-thread blocks, %x in the GPU form", what, c2, c1)
			}
			t.Logf("%s: coefficient bits %x", what, c1)
		}
	}
}
