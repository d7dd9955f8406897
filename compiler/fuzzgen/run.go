package fuzzgen

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ngen-ml/ngen/codegen"
	"github.com/ngen-ml/ngen/codegen/jit"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// The differential runner: Check declares specs as one model, compiles it
// fused and unfused with codegen/jit, trains each build for a few steps
// on the CPU backend and compares (compare.go):
//
//   - fused against unfused, on one device: bit for bit when no op of the
//     spec changes its arithmetic between the two (row.inexact), else to
//     stated tolerances;
//   - the fused build's GPU forms (cpu.Options.GPUForms) against its CPU
//     baseline forms (cpu.Options.Baseline);
//   - the fused build against PyTorch (oracle.go): forward, gradients of
//     step 1, parameters and state after the steps, and the prediction;
//   - the planned peak memory (codegen.MakeReport at the run's batch)
//     against the bytes the session allocated (the device's peak).

// Options configure Check.
type Options struct {
	Steps   int    // training steps (0: 3)
	Threads int    // CPU device threads (0: 2)
	Seed    uint64 // session seed: parameters and dropout (0: 1)
	// Skip turns checks off: "fuse", "gpuforms", "torch", "memory".
	Skip map[string]bool
	// Dev, GPUDev and BaseDev are the devices the runs use (nil: made by
	// Check and closed after it). Sharing them saves a start-up per call.
	Dev, GPUDev, BaseDev *cpu.Device
}

// Failure is a mismatch or an error one check found.
type Failure struct {
	Check string // "build", "compile", "run", "fused/unfused", "gpu forms", "torch", "memory"
	// Spec is the failing spec's index in Check's specs, -1 when the
	// failure cannot be put on one (the summed loss).
	Spec int
	Msg  string
}

func (f Failure) String() string { return fmt.Sprintf("%s (spec %d): %s", f.Check, f.Spec, f.Msg) }

// Stats is where Check's time went.
type Stats struct {
	Compile, Run, Torch time.Duration
	Modules             int // host modules built (cache misses and hits)
	// Diverged is the step at which the fused host run's loss left the
	// floating-point range (the comparisons then cover the steps before
	// it), or 0.
	Diverged int
	// Phases times each compilation and run by name.
	Phases map[string]time.Duration
}

func (st *Stats) phase(name string, t0 time.Time) {
	if st.Phases == nil {
		st.Phases = map[string]time.Duration{}
	}
	st.Phases[name] += time.Since(t0)
}

// checker is one Check call.
type checker struct {
	o     Options
	specs []*Spec
	built *Built
	batch int
	data  [][]StepData // per spec, per step
	fails []Failure
	st    Stats
	// diverged is the step (1-based) at which a run's loss left the
	// floating-point range (runtime.LossError), or 0.
	diverged int
}

func (c *checker) fail(check string, spec int, format string, args ...any) {
	c.fails = append(c.fails, Failure{Check: check, Spec: spec, Msg: fmt.Sprintf(format, args...)})
}

// Check runs every comparison on specs, declared as one model. They must
// share a dtype, an optimizer and a batch size. The error is for what
// keeps the checks from running at all (no C++ compiler, no torch).
func Check(specs []*Spec, o Options) ([]Failure, Stats, error) {
	if o.Steps == 0 {
		o.Steps = 3
	}
	if o.Threads == 0 {
		o.Threads = 2
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	c := &checker{o: o, specs: specs, batch: specs[0].Batch}
	for _, s := range specs {
		if s.Batch != c.batch {
			return nil, c.st, fmt.Errorf("fuzzgen: specs %s and %s have batches %d and %d", specs[0].Name, s.Name, c.batch, s.Batch)
		}
		c.data = append(c.data, s.MakeData(o.Steps))
	}
	name := specs[0].Name
	if len(specs) > 1 {
		name = fmt.Sprintf("fuzz_group_%d", specs[0].Seed)
	}
	var err error
	if c.built, err = BuildAll(name, specs); err != nil {
		c.blame("build", err.Error(), func(s *Spec) bool { _, e := s.Build(); return e != nil })
		return c.fails, c.st, nil
	}
	devs := []*cpu.Device{o.Dev, o.GPUDev, o.BaseDev}
	opts := []cpu.Options{{Threads: o.Threads}, {Threads: o.Threads, GPUForms: true}, {Threads: o.Threads, Baseline: true}}
	for i := range devs {
		if devs[i] == nil {
			d, err := cpu.New(opts[i])
			if err != nil {
				return nil, c.st, err
			}
			defer d.Close()
			devs[i] = d
		}
	}
	fused := c.compile(true)
	if fused == nil {
		return c.fails, c.st, nil
	}
	rf := c.run(devs[0], "host", fused, !o.Skip["memory"])
	if rf == nil {
		if k := c.diverged; k > 1 {
			// The models' loss leaves the floating-point range at step
			// k (a random model may diverge: fuzz_1066, exp of a
			// convolution that a linear term and SGD with momentum push
			// up): every comparison runs again over the k-1 steps before.
			o.Steps = k - 1
			fails, st, err := Check(specs, o)
			st.Compile += c.st.Compile
			st.Run += c.st.Run
			st.Diverged = k
			return fails, st, err
		}
		return c.fails, c.st, nil
	}
	if !o.Skip["fuse"] || !o.Skip["memory"] {
		if unfused := c.compile(false); unfused != nil {
			if ru := c.run(devs[0], "host", unfused, !o.Skip["memory"]); ru != nil && !o.Skip["fuse"] {
				c.compareFuse(rf, ru)
			}
		}
	}
	if !o.Skip["gpuforms"] {
		rg := c.run(devs[1], "GPU forms", fused, false)
		rb := c.run(devs[2], "baseline forms", fused, false)
		if rg != nil && rb != nil {
			c.compareForms(rg, rb)
		}
	}
	if !o.Skip["torch"] {
		if err := c.oracle(rf); err != nil {
			return c.fails, c.st, err
		}
	}
	return c.fails, c.st, nil
}

// blame records a failure of the whole model on each spec that fails
// alone (bad), or on all (-1) when none does.
func (c *checker) blame(check, msg string, bad func(*Spec) bool) {
	found := false
	if len(c.specs) > 1 {
		for k, s := range c.specs {
			if bad(s) {
				c.fail(check, k, "%s", msg)
				found = true
			}
		}
	}
	if !found {
		c.fail(check, -1, "%s", msg)
	}
}

// program is one compiled build.
type program struct {
	p      *compiler.Program
	mod    *runtime.Module
	plan   *runtime.Plan
	fuse   bool
	report *codegen.Report
}

func (c *checker) compile(fuse bool) *program {
	t0 := time.Now()
	what := map[bool]string{true: "fused", false: "unfused"}[fuse]
	defer func() { c.st.Compile += time.Since(t0); c.st.phase("compile "+what, t0) }()
	p, err := compiler.Compile(c.built.Model, compiler.Options{Fuse: fuse, RefBatch: c.batch})
	if err != nil {
		c.blame("compile", what+": "+err.Error(), func(s *Spec) bool {
			b, err := s.Build()
			if err != nil {
				return true
			}
			_, err = compiler.Compile(b.Model, compiler.Options{Fuse: fuse, RefBatch: c.batch})
			return err != nil
		})
		return nil
	}
	rep, err := codegen.MakeReport(p)
	if err != nil {
		c.fail("compile", -1, "%s: report: %v", what, err)
		return nil
	}
	mod, plan, err := jit.Build(p)
	if err != nil {
		c.fail("compile", -1, "%s: %v", what, err)
		return nil
	}
	c.st.Modules++
	return &program{p: p, mod: mod, plan: plan, fuse: fuse, report: rep}
}

// result is what one training run produced, by buffer name.
type result struct {
	what                        string
	init, grads, params, states map[string][]float64
	initStates                  map[string][]float64
	loss                        []float64
	outs                        [][]float64 // per spec, the eval-mode prediction after the steps
	// noise, on a reference run only, widens the tolerance of a tensor
	// ("loss", "grad:NAME", "param:NAME", "state:NAME", "out:K") by an
	// absolute amount: how far the reference itself is from a more
	// precise run of the same computation (see oracle).
	noise map[string]float64
}

// inputKind says how a spec's input node is written.
func (c *checker) write(s *runtime.Session, step int) error {
	for k, sp := range c.specs {
		for _, n := range sp.Nodes {
			if !isSource(n.Op) || n.Op == "param" {
				continue
			}
			name := c.built.Prefix[k] + n.Name
			if _, err := s.Lookup("input", name); err != nil {
				continue // not an input of this build (every use pruned)
			}
			v := c.data[k][step][n.Name]
			var data any
			switch {
			case n.Op != "input":
				d := make([]int32, len(v))
				for i := range v {
					d[i] = int32(v[i])
				}
				data = d
			case sp.DType == "f32":
				d := make([]float32, len(v))
				for i := range v {
					d[i] = float32(v[i])
				}
				data = d
			default:
				data = v
			}
			if err := s.WriteInput(name, data, c.batch); err != nil {
				return fmt.Errorf("input %s: %v", name, err)
			}
		}
	}
	return nil
}

// readAll reads every buffer of a role; for "state", only the state the
// model declares (not the optimizer's, which the parameters reflect).
func (c *checker) readAll(s *runtime.Session, role string) (map[string][]float64, error) {
	out := map[string][]float64{}
	for _, n := range s.Names(role) {
		if role == "state" && c.built.Model.Forward.Lookup(ir.State, n) == nil {
			continue
		}
		i, err := s.Lookup(role, n)
		if err != nil {
			return nil, err
		}
		if out[n], err = s.ReadFloats(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// run trains pr for the steps on dev and predicts in eval mode; with
// memory it also checks the planned peak against the device's.
func (c *checker) run(dev *cpu.Device, devName string, pr *program, memory bool) *result {
	t0 := time.Now()
	what := fmt.Sprintf("%s, %s", map[bool]string{true: "fused", false: "unfused"}[pr.fuse], devName)
	defer func() { c.st.Run += time.Since(t0); c.st.phase("run "+what, t0) }()
	r := &result{what: what}
	bad := func(format string, args ...any) *result {
		c.fail("run", -1, "%s: %s", what, fmt.Sprintf(format, args...))
		return nil
	}
	before := dev.MemStats().Allocated
	runtime.ResetPeak(dev)
	s, err := runtime.NewSession(dev, pr.plan, pr.mod, runtime.SessionOptions{MaxBatch: c.batch, Seed: c.o.Seed})
	if err != nil {
		return bad("%v", err)
	}
	defer s.Close()
	if r.init, err = c.readAll(s, "param"); err != nil {
		return bad("%v", err)
	}
	if r.initStates, err = c.readAll(s, "state"); err != nil {
		return bad("%v", err)
	}
	for step := 0; step < c.o.Steps; step++ {
		if err := c.write(s, step); err != nil {
			return bad("step %d: %v", step+1, err)
		}
		if err := s.Run("step", c.batch); err != nil {
			if le := (*runtime.LossError)(nil); errors.As(err, &le) && c.diverged == 0 {
				c.diverged = step + 1
			}
			return bad("step %d: %v", step+1, err)
		}
		i, err := s.Lookup("output", "loss")
		if err != nil {
			return bad("%v", err)
		}
		l, err := s.ReadFloats(i)
		if err != nil {
			return bad("%v", err)
		}
		r.loss = append(r.loss, l[0])
		if step == 0 {
			if r.grads, err = c.readAll(s, "grad"); err != nil {
				return bad("%v", err)
			}
		}
	}
	if r.params, err = c.readAll(s, "param"); err != nil {
		return bad("%v", err)
	}
	if r.states, err = c.readAll(s, "state"); err != nil {
		return bad("%v", err)
	}
	s.SetTrain(false)
	fn := "predict"
	var f *runtime.Func
	for i := range pr.plan.Funcs {
		if pr.plan.Funcs[i].Name == "predict_eval" {
			fn = "predict_eval"
		}
	}
	for i := range pr.plan.Funcs {
		if pr.plan.Funcs[i].Name == fn {
			f = &pr.plan.Funcs[i]
		}
	}
	if err := c.write(s, 0); err != nil {
		return bad("predict: %v", err)
	}
	if err := s.Run(fn, c.batch); err != nil {
		return bad("%s: %v", fn, err)
	}
	outs := map[string][]float64{}
	for _, o := range f.Outputs {
		if outs[o.Name], err = s.ReadFloats(o.Buf); err != nil {
			return bad("%s output %s: %v", fn, o.Name, err)
		}
	}
	for k := range c.specs {
		name := "output"
		if len(c.specs) > 1 {
			name = c.built.Prefix[k] + "out"
		}
		v, ok := outs[name]
		if !ok {
			return bad("%s has no output %s (it has %v)", fn, name, keys(outs))
		}
		r.outs = append(r.outs, v)
	}
	if memory {
		c.checkMemory(dev, s, pr, before)
	}
	return r
}

// checkMemory compares the report's planned peak at the run's batch with
// what the session holds and what the device's peak says it allocated.
func (c *checker) checkMemory(dev *cpu.Device, s *runtime.Session, pr *program, before int64) {
	what := map[bool]string{true: "fused", false: "unfused"}[pr.fuse]
	planned := pr.report.PeakBytes
	held := s.MemoryBytes()
	peak := dev.MemStats().Peak - before
	if held != planned || peak != planned {
		c.fail("memory", -1, "%s: ngen report's planned peak is %d bytes at batch %d; the session holds %d and the device's peak grew by %d",
			what, planned, c.batch, held, peak)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// specOf is the index of the spec a buffer name belongs to (its prefix).
func (c *checker) specOf(name string) int {
	if len(c.specs) == 1 {
		return 0
	}
	for k, p := range c.built.Prefix {
		if strings.HasPrefix(name, p) {
			return k
		}
	}
	return -1
}
