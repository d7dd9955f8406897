package runtime

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/ngen-ml/ngen/runtime/schedule"
)

// Session runs a Plan on a Device: it owns the persistent storage
// (parameters, gradients, optimizer state, inputs) and one arena that every
// function's temporaries share.
type Session struct {
	dev  Device
	plan *Plan
	fns  []Function
	// launches is, per kernel, how many launches one of its steps takes
	// on this device (launchCounts); launchIdx the boxed indexes.
	launches  []int
	launchIdx []Arg
	ptrs      []Ptr
	base      []Ptr // allocations to free
	env       map[string]int
	maxEnv    map[string]int
	seed      uint64
	t         int // optimizer steps taken
	// schedT is the schedule's step count: the updates taken and, under
	// loss scaling, those skipped (loss_scale.go), as a PyTorch loop
	// calls scheduler.step() whether or not scaler.step skipped.
	schedT   int
	calls    uint64 // training calls (micro-batches) that succeeded: ngen.dropout_counter
	row0     int64  // global index of this batch's first row (dropout keys)
	train    bool
	lr       float64
	sched    *schedule.Schedule // nil: the rate is lr at every step
	wd       float64            // run-time weight decay (SetWeightDecay)
	clip     float64            // run-time max norm (SetClipNorm); +Inf: off
	loss     float64            // the last step's, from the status block
	arenaLen int64
	acc      accumulator  // gradient accumulation state (accumulate.go)
	dp       dataParallel // data-parallel group, if any (dataparallel.go)
	prof     *profiler    // nil unless SetProfiling(true)
	closed   bool
	// nonFinite holds, per float input buffer last written with a NaN or
	// ±Inf, the first such element and its value: inference refuses it.
	nonFinite map[int]badValue
	// unscanned marks the input buffers WriteStepInput wrote, which
	// inference scans on the device before it runs (finiteInputs).
	unscanned []bool
	// ran is the inference function Run ran last, nil after anything
	// else: Read refuses a non-finite value in one of its outputs.
	ran    *Func
	status [StatusWords]int32 // the status block as the last check read it
	bound  updateBound        // update_bound.go
	scaler lossScale          // dynamic loss scaling (loss_scale.go)
	clock  clockState         // the device clock (clock.go)
	pipe   pipeline           // pipelined steps (pipeline.go)
	// graphKeys caches graphed's keys (graph.go).
	graphKeys graphKeys
	// batch is env["B"]; resolved caches each step's call at it (execAt).
	batch    int
	resolved [][]callCache
	// Per-step scratch, so that a step allocates as little as it can:
	// a launch's arguments (Device.Launch keeps no reference) and each
	// buffer's pointer as an Arg (boxed once: ptrs never change after
	// NewSession).
	args       []Arg
	ptrArgs    []Arg
	boxed      []boxedArg          // box's cache of scalar arguments
	nextBox    int                 // the entry box replaces next once the cache is full
	statusRead *[StatusWords]int32 // what check reads the status block into
	scal       map[string]float64  // the update's host scalars (the max norm; the rest are in the clock)
}

// badValue is a non-finite element of an input.
type badValue struct {
	at int
	v  float64
}

// SessionOptions size a session.
type SessionOptions struct {
	MaxBatch int            // bound for the symbol B
	Symbols  map[string]int // bounds for other symbols
	Seed     uint64         // parameter init and dropout
	// AccumulationSteps k > 1 makes Run("step") accumulate the gradients
	// of k calls (micro-batches) and update on every k-th (accumulate.go).
	AccumulationSteps int
}

// NewSession loads the module, allocates storage for the largest batch and
// initialises the parameters.
func NewSession(dev Device, p *Plan, m *Module, opt SessionOptions) (*Session, error) {
	if dev == nil {
		return nil, fmt.Errorf("%s: the device is nil", p.Model)
	}
	if opt.MaxBatch <= 0 {
		return nil, fmt.Errorf("%s: batch size must be positive, got %d", p.Model, opt.MaxBatch)
	}
	if opt.AccumulationSteps < 0 {
		return nil, fmt.Errorf("%s: AccumulationSteps must not be negative, got %d", p.Model, opt.AccumulationSteps)
	}
	if err := checkLR(p.Optimizer.LR); err != nil {
		return nil, fmt.Errorf("%s: the plan's learning rate: %w", p.Model, err)
	}
	if problem := p.Optimizer.Schedule.Check(p.Optimizer.LR); problem != "" {
		return nil, fmt.Errorf("%s: the plan's learning-rate schedule: %s", p.Model, problem)
	}
	var err error
	s := &Session{dev: dev, plan: p, seed: opt.Seed, train: true, lr: p.Optimizer.LR, sched: p.Optimizer.Schedule, wd: p.Optimizer.WeightDecay, clip: initialClipNorm(p.Optimizer),
		env: map[string]int{}, maxEnv: map[string]int{}, acc: accumulator{k: max(opt.AccumulationSteps, 1)}, clock: clockState{buf: p.ClockBuffer()}}
	if s.scaler, err = newLossScale(p.Optimizer.Scaler); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Model, err)
	}
	for y, n := range opt.Symbols {
		if !slices.Contains(p.Symbols, y) || y == "B" {
			return nil, fmt.Errorf("%s: SessionOptions.Symbols names %q, which is not one of the model's symbols %v (B's bound is MaxBatch)", p.Model, y, p.Symbols)
		}
		if n <= 0 {
			return nil, fmt.Errorf("%s: SessionOptions.Symbols bounds %s by %d; want a positive bound", p.Model, y, n)
		}
	}
	for _, y := range p.Symbols {
		n := opt.Symbols[y]
		if y == "B" {
			n = opt.MaxBatch
		}
		if n <= 0 {
			return nil, fmt.Errorf("%s: no bound given for symbol %s", p.Model, y)
		}
		s.maxEnv[y], s.env[y] = n, n
	}
	s.batch = s.env["B"]
	if err := checkSizes(p, s.maxEnv); err != nil {
		return nil, err
	}
	ld, err := dev.Load(m)
	if err != nil {
		return nil, fmt.Errorf("%s: loading kernels: %w", p.Model, err)
	}
	for i := range m.Kernels {
		s.fns = append(s.fns, ld.Function(i))
	}
	s.launches = launchCounts(dev, m.Kernels)
	s.launchIdx = boxLaunchIndexes(s.launches)
	if err := s.allocate(); err != nil {
		s.Close()
		return nil, err
	}
	if s.acc.k > 1 {
		if err := s.allocSum(); err != nil {
			s.Close()
			return nil, err
		}
	}
	if err := s.initParams(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.initBound(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.initClock(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.syncClock(); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Session) bytes(b *Buffer, env map[string]int) int64 {
	return b.Elems.Eval(env) * int64(b.DType.Size())
}

func (s *Session) allocate() error {
	p := s.plan
	s.ptrs = make([]Ptr, len(p.Buffers))
	l := planLayout(p, s.maxEnv)
	offs, persist, arenaOff := l.offs, l.persist, l.arenaOff
	s.arenaLen = l.arena
	pbase, err := s.dev.Alloc(persist)
	if err != nil {
		return fmt.Errorf("%s: allocating %d bytes of parameters, optimizer state and inputs at batch %d: %w", p.Model, persist, s.maxEnv["B"], err)
	}
	s.base = append(s.base, pbase)
	if err := s.dev.Memset(pbase, 0, persist); err != nil {
		return err
	}
	abase, err := s.dev.Alloc(s.arenaLen)
	if err != nil {
		return fmt.Errorf("%s: allocating the %d-byte arena of temporaries at batch %d: %w", p.Model, s.arenaLen, s.maxEnv["B"], err)
	}
	s.base = append(s.base, abase)
	var resolve func(i, depth int) (Ptr, error)
	resolve = func(i, depth int) (Ptr, error) {
		b := &p.Buffers[i]
		switch b.Placement {
		case Persistent:
			return pbase + Ptr(offs[i]), nil
		case Arena:
			return abase + Ptr(arenaOff[i]), nil
		}
		if depth > len(p.Buffers) || b.AliasOf < 0 || b.AliasOf >= len(p.Buffers) {
			return 0, fmt.Errorf("%s: buffer %s: bad alias", p.Model, b.Name)
		}
		q, err := resolve(b.AliasOf, depth+1)
		return q + Ptr(b.Offset*int64(b.DType.Size())), err
	}
	for i := range p.Buffers {
		if s.ptrs[i], err = resolve(i, 0); err != nil {
			return err
		}
	}
	return nil
}

// initParams draws every parameter (and initialises declared state, such
// as running statistics) on the host from one seeded stream, in
// declaration order, so that a seed gives the same model on every backend.
func (s *Session) initParams() error {
	rng := rand.New(rand.NewPCG(s.seed, 0x6e67656e))
	for i := range s.plan.Buffers {
		b := &s.plan.Buffers[i]
		if (b.Role != "param" && b.Role != "state") || b.Init.Kind == "" {
			continue
		}
		n := int(b.Elems.Eval(s.maxEnv))
		vals := make([]float64, n)
		for k := range vals {
			switch b.Init.Kind {
			case "uniform":
				vals[k] = b.Init.A + (b.Init.B-b.Init.A)*rng.Float64()
			case "normal":
				vals[k] = b.Init.A + b.Init.B*rng.NormFloat64()
			case "const":
				vals[k] = b.Init.A
			case "sinusoid": // a positional encoding table [L, D], D = A
				d := int(b.Init.A)
				p, i := k/d, k%d
				angle := float64(p) * math.Exp(-float64(i-i%2)*math.Log(10000)/float64(d))
				vals[k] = math.Sin(angle)
				if i%2 == 1 {
					vals[k] = math.Cos(angle)
				}
			}
		}
		if err := s.writeFloats(i, vals); err != nil {
			return err
		}
	}
	return nil
}

// Close frees the session's device memory.
func (s *Session) Close() error {
	if s == nil {
		return s.alive("Close")
	}
	// The step in flight's verdict is not lost: its error joins Close's.
	errs := []error{s.Flush()}
	s.releaseStaging()
	errs = append(errs, s.freeRing())
	for _, p := range s.base {
		errs = append(errs, s.dev.Free(p))
	}
	s.base = nil
	s.closed = true
	return errors.Join(errs...)
}

// Plan returns the plan the session runs.
func (s *Session) Plan() *Plan { return s.plan }

// Device returns the session's device.
func (s *Session) Device() Device { return s.dev }

// SetTrain switches dropout (and later batch norm) between training and
// evaluation behaviour, like torch's model.train()/model.eval().
// A zero generated Model (no session) ignores it; its other methods say
// it was not made by New.
func (s *Session) SetTrain(train bool) {
	if s != nil {
		s.train = train
	}
}

// Training reports the mode.
func (s *Session) Training() bool { return s != nil && s.train }

// MaxLR bounds the learning rate wherever it enters (the plan, SetLR, a
// checkpoint's ngen.lr). No optimizer ngen lowers trains at a rate near
// it; a rate above it is a slip (3.4e38, a unit error), and a rate of
// 3.4e38 turned every weight non-finite in a step that reported success.
// A rate below it can still make an update overflow (a huge gradient,
// SGD's lr·g): the update check (compiler/guard.go) fails such a step.
const MaxLR = 1e6

// checkLR says what is wrong with a learning rate, or nil.
func checkLR(lr float64) error {
	if math.IsNaN(lr) || math.IsInf(lr, 0) || lr < 0 || lr > MaxLR {
		return fmt.Errorf("learning rate %v: want a finite rate in [0, %g] (runtime.MaxLR)", lr, MaxLR)
	}
	return nil
}

// SetLR changes the learning rate for later steps. It must be finite,
// not negative and at most MaxLR; otherwise the rate stays as it was.
// It overrides the schedule: later steps all run at lr until SetSchedule
// sets one again (a checkpoint saved meanwhile records the override).
func (s *Session) SetLR(lr float64) error {
	if err := s.alive("SetLR"); err != nil {
		return err
	}
	if err := checkLR(lr); err != nil {
		return fmt.Errorf("%s: SetLR(%v): %w", s.plan.Model, lr, err)
	}
	s.lr, s.sched = lr, nil
	s.markClock()
	return nil
}

// SetSchedule makes the rate of later steps sc's rate at the schedule's
// step counter, with base rate base (PyTorch's initial_lr; OneCycleLR's
// max_lr): update u (from 1) runs at sc.Rate(base, u-1), so a session
// that has taken steps resumes sc where its counter is, as a PyTorch
// scheduler built with last_epoch = steps-1 does. The counter is
// ScheduleSteps: the step counter plus the updates a loss scaler
// skipped. A nil sc is a constant rate,
// SetLR(base). The plan's schedule (Plan().Optimizer.Schedule) is the
// one a new session starts with. Nothing changes on error.
func (s *Session) SetSchedule(base float64, sc *schedule.Schedule) error {
	if err := s.alive("SetSchedule"); err != nil {
		return err
	}
	if err := checkLR(base); err != nil {
		return fmt.Errorf("%s: SetSchedule: %w", s.plan.Model, err)
	}
	if problem := sc.Check(base); problem != "" {
		return fmt.Errorf("%s: SetSchedule: %s", s.plan.Model, problem)
	}
	if sc != nil {
		c := *sc
		c.Milestones = append([]int(nil), sc.Milestones...)
		sc = &c
	}
	s.lr, s.sched = base, sc
	s.markClock()
	return nil
}

// Schedule is the schedule later steps follow (nil: a constant rate) and
// its base rate.
func (s *Session) Schedule() (base float64, sc *schedule.Schedule) { return s.lr, s.sched }

// LR is the learning rate of the next step: the schedule's rate at its
// step counter (ScheduleSteps), or the constant rate.
func (s *Session) LR() float64 { return s.rate(s.schedT + 1) }

// rate is the learning rate of update u (from 1, ScheduleSteps' count).
func (s *Session) rate(u int) float64 { return s.sched.Rate(s.lr, u-1) }

// Steps is the number of optimizer steps taken: Adam's t, which a step
// skipped under loss scaling does not advance.
func (s *Session) Steps() int { return s.t }

// ScheduleSteps is the number of steps the learning-rate schedule has
// taken: Steps plus the updates a loss scaler skipped (since the
// session's start, or as the checkpoint it loaded counted them), as a
// PyTorch loop steps its scheduler after every scaler.step, skipped or
// not.
func (s *Session) ScheduleSteps() int { return s.schedT }

// ArenaBytes is the size of the temporaries arena at the session's batch.
func (s *Session) ArenaBytes() int64 { return s.arenaLen }

// MaxBatch is the batch size the session was sized for.
func (s *Session) MaxBatch() int { return s.maxEnv["B"] }

func (s *Session) fn(name string) (int, *Func, error) {
	for i := range s.plan.Funcs {
		if s.plan.Funcs[i].Name == name {
			return i, &s.plan.Funcs[i], nil
		}
	}
	return 0, nil, fmt.Errorf("%s: no function %q", s.plan.Model, name)
}

// Run executes function name ("step", "predict") on a batch of the given
// size, which must not exceed the session's batch size. "step" is the
// gradient phase then the update phase (RunGrads, RunUpdate), with the
// checks once at the end; with SessionOptions.AccumulationSteps k > 1 it
// runs the update only on every k-th call (accumulate.go).
//
// Inference (every function but "step") never touches training state:
// parameters, optimizer and declared state, the step count, the dropout
// counter and pending micro-batches are as before, whether it succeeds
// or fails. In training mode it draws the dropout masks the next step
// would and normalises with batch statistics, but commits nothing. It
// refuses a float input holding a NaN or ±Inf, as a step refuses the
// non-finite loss such an input gives.
func (s *Session) Run(name string, batch int) (err error) {
	if err := s.alive(name); err != nil {
		return err
	}
	s.ran = nil
	fi, f, err := s.fn(name)
	if err != nil {
		return err
	}
	if err := s.takeInputs(); err != nil {
		return err
	}
	defer func() {
		// Behind the launches, which read the current input set.
		if e := s.fenceInputs(); err == nil {
			err = e
		}
	}()
	if err := s.setBatch(name, batch); err != nil {
		return err
	}
	if name == "step" && s.acc.k == 1 {
		err = s.syncClockForUpdate()
	} else {
		err = s.syncClock()
	}
	if err != nil {
		return err
	}
	if name == "step" {
		if s.pipelinable() {
			return s.pipelinedStep(fi, f)
		}
		if err := s.Flush(); err != nil {
			return err
		}
		if err := s.trainStep(fi, f); err != nil {
			return err // the dropout counter too is as before
		}
		s.calls++
		if s.pipe.on {
			// Pipelining is on but this step could not be (accumulation,
			// a group, profiling): judged now, its loss is taken the same
			// way (TakeLosses).
			s.held(s.loss)
		}
		return nil
	}
	if err := s.finiteInputs(f); err != nil {
		return err
	}
	s.row0 = s.sampleOffset(batch)
	if err := s.graphed(f, func() error { return s.runSteps(fi, f, 0, len(f.Steps), nil) }); err != nil {
		return err
	}
	if err := s.check(name, s.t); err != nil { // no step: name the steps taken
		return err
	}
	s.ran = f
	return nil
}

func (s *Session) setBatch(name string, batch int) error {
	if batch <= 0 || batch > s.maxEnv["B"] {
		return fmt.Errorf("%s.%s: batch of %d rows, want 1..%d", s.plan.Model, name, batch, s.maxEnv["B"])
	}
	s.env["B"], s.batch = batch, batch
	return nil
}

// callCache is one step's device call resolved at a batch size and an
// input set (execAt).
type callCache struct {
	ok     bool
	b, set int
	grid   Dim3
	gemm   GemmArgs
	bytes  int64
	// A launch's arguments, when none is a scalar the host computes
	// per step (argsOK), with the train flag, first row and seed they
	// were made with.
	args   []Arg
	argsOK bool
	train  bool
	row0   int64
	seed   uint64
}

// resolvedAt is the call cache of step i of function fi (of n steps)
// with input set set (pipeline_inputs.go: the steps alternate).
func (s *Session) resolvedAt(fi, n, i, set int) *callCache {
	if len(s.resolved) <= fi {
		s.resolved = append(s.resolved, make([][]callCache, fi+1-len(s.resolved))...)
	}
	if s.resolved[fi] == nil {
		s.resolved[fi] = make([]callCache, 2*n)
	}
	return &s.resolved[fi][2*i+set]
}

// finiteInputs refuses to run f on a float input that was last written
// with a NaN or ±Inf (an LSTM's h0, say): the forward pass would return
// non-finite outputs with no error.
func (s *Session) finiteInputs(f *Func) error {
	for _, in := range f.Inputs {
		if s.unscanned != nil && s.unscanned[in.Buf] {
			if err := s.scanInput(in.Buf); err != nil {
				return err
			}
		}
		if bad, ok := s.nonFinite[in.Buf]; ok {
			b := &s.plan.Buffers[in.Buf]
			return fmt.Errorf("%s.%s: input %q%s: element %d is %v; inference refuses non-finite inputs", s.plan.Model, f.Name, b.Name, declared(b), bad.at, bad.v)
		}
	}
	return nil
}

// runSteps executes steps [from, to) of function fi.
func (s *Session) runSteps(fi int, f *Func, from, to int, scal map[string]float64) error {
	for i := from; i < to; i++ {
		st := &f.Steps[i]
		if !s.runs(st.When) {
			continue
		}
		var err error
		if s.prof != nil {
			err = s.timeStep(fi, f.Name, i, st, func() error { return s.exec(st, scal) })
		} else {
			err = s.execAt(s.resolvedAt(fi, len(f.Steps), i, s.pipe.in.cur), st, scal)
		}
		if err != nil {
			if st.Label != "" {
				return fmt.Errorf("%s.%s: %s: %w", s.plan.Model, f.Name, st.Label, err)
			}
			return fmt.Errorf("%s.%s: %w", s.plan.Model, f.Name, err)
		}
	}
	return nil
}

func (s *Session) exec(st *Step, scal map[string]float64) error { return s.execAt(nil, st, scal) }

// execAt is exec with the step's call resolved once per batch size and
// input set into c (nil: evaluate every time): the grid, the GEMM's
// arguments and the bytes a memset or copy moves are the plan's
// expressions over the bindings, which would otherwise be evaluated,
// with map lookups, at every step.
func (s *Session) execAt(c *callCache, st *Step, scal map[string]float64) error {
	d := s.dev
	if c != nil && (!c.ok || c.b != s.batch || c.set != s.pipe.in.cur) {
		*c = callCache{ok: true, b: s.batch, set: s.pipe.in.cur, args: c.args[:0]}
		switch st.Kind {
		case LaunchStep:
			c.grid = Dim3{st.Grid[0].Eval(s.env), st.Grid[1].Eval(s.env), st.Grid[2].Eval(s.env)}
		case GemmStep:
			c.gemm = st.Gemm.ArgsFor(s.env, s.plan.Buffers, s.ptrs)
		case MemsetStep, CopyStep:
			c.bytes = s.bytes(&s.plan.Buffers[st.Buf], s.env)
		}
	}
	switch st.Kind {
	case LaunchStep:
		block := Dim3{st.Block[0], st.Block[1], st.Block[2]}
		if c != nil && c.argsOK && c.train == s.train && c.row0 == s.row0 && c.seed == s.seed {
			return s.launch(st, c.grid, block, c.args)
		}
		if cap(s.args) < len(st.Args) {
			s.args = make([]Arg, len(st.Args))
		}
		args := s.args[:len(st.Args)]
		stable := true // every argument is one of those c's key covers
		for i, a := range st.Args {
			switch {
			case a.Buf >= 0:
				args[i] = s.ptrArg(a.Buf)
				continue
			case a.Scalar == "":
				args[i] = s.box(a.Kind, constBits(a))
				continue
			case a.Scalar == "seed":
				args[i] = s.box(ArgU64, s.seed)
				continue
			case a.Scalar == "step":
				// Dropout is keyed by the optimizer step the batch
				// contributes to (1-based), not by the call, so that the
				// micro-batches of one update draw one batch's masks.
				// (A plan with a device clock reads it from there.)
				args[i] = s.box(ArgU64, uint64(s.t)+1)
				stable = false
				continue
			case a.Scalar == "row0":
				args[i] = s.box(ArgI64, uint64(s.row0))
				continue
			case a.Scalar == LaunchScalar:
				args[i] = s.launchIdx[0] // s.launch sets it per launch
				continue
			}
			var v float64
			switch a.Scalar {
			case "B":
				v = float64(s.batch)
			case "train":
				v = 0
				if s.train {
					v = 1
				}
			default:
				var err error
				if v, err = s.scalar(a.Scalar, scal); err != nil {
					return err
				}
				// A symbol's binding but B's (the batch, in c's key) is
				// fixed for the session; the other scalars are the host's.
				if _, sym := s.env[a.Scalar]; !sym {
					stable = false
				}
			}
			args[i] = s.box(a.Kind, scalarBits(a.Kind, v))
		}
		if c != nil {
			if stable {
				// The same arguments until the batch, the input set, the
				// train flag, the batch's first row or the seed changes.
				c.args = append(c.args[:0], args...)
				c.argsOK, c.train, c.row0, c.seed = true, s.train, s.row0, s.seed
			}
			return s.launch(st, c.grid, block, args)
		}
		grid := Dim3{st.Grid[0].Eval(s.env), st.Grid[1].Eval(s.env), st.Grid[2].Eval(s.env)}
		return s.launch(st, grid, block, args)
	case GemmStep:
		if c != nil {
			return d.Gemm(c.gemm)
		}
		return d.Gemm(st.Gemm.ArgsFor(s.env, s.plan.Buffers, s.ptrs))
	case MemsetStep, CopyStep:
		n := s.bytes(&s.plan.Buffers[st.Buf], s.env)
		if c != nil {
			n = c.bytes
		}
		if st.Kind == MemsetStep {
			return d.Memset(s.ptrs[st.Buf], 0, n)
		}
		return d.CopyDevice(s.ptrs[st.Buf], s.ptrs[st.Src], n)
	}
	return fmt.Errorf("unknown step kind %d", st.Kind)
}

// ptrArg is buffer i's pointer as a launch argument.
func (s *Session) ptrArg(i int) Arg {
	if s.ptrArgs == nil {
		s.ptrArgs = make([]Arg, len(s.ptrs))
		for j, p := range s.ptrs {
			s.ptrArgs[j] = p
		}
	}
	return s.ptrArgs[i]
}

// boxedArg is an Arg made once for a value of a kind (its bits).
type boxedArg struct {
	kind ArgKind
	bits uint64
	a    Arg
}

// maxBoxed bounds the session's cache of boxed scalar arguments.
const maxBoxed = 32

// box returns the launch argument of kind kind with the bits bits (as
// scalarBits encodes them), from the session's cache when a launch
// already passed it. Arg is an interface: boxing a float32, or an
// integer above 255, allocates, and a step's scalars (the seed, the max
// norm, a row offset) keep their values from step to step, so a step
// boxes none.
func (s *Session) box(kind ArgKind, bits uint64) Arg {
	if bits < 256 && kind != ArgF32 && kind != ArgF64 {
		// Go boxes an integer below 256 without allocating.
		switch kind {
		case ArgI32:
			return int32(bits)
		case ArgI64:
			return int64(bits)
		case ArgU64:
			return bits
		}
	}
	for i := range s.boxed {
		if b := &s.boxed[i]; b.kind == kind && b.bits == bits {
			return b.a
		}
	}
	var a Arg
	switch kind {
	case ArgI32:
		a = int32(uint32(bits))
	case ArgI64:
		a = int64(bits)
	case ArgU64:
		a = bits
	case ArgF32:
		a = math.Float32frombits(uint32(bits))
	default:
		a = math.Float64frombits(bits)
	}
	b := boxedArg{kind, bits, a}
	if len(s.boxed) < maxBoxed {
		s.boxed = append(s.boxed, b)
	} else {
		s.boxed[s.nextBox] = b
		s.nextBox = (s.nextBox + 1) % maxBoxed
	}
	return a
}

// scalarBits encodes v as the bits box takes for kind.
func scalarBits(kind ArgKind, v float64) uint64 {
	switch kind {
	case ArgI32:
		return uint64(uint32(int32(v)))
	case ArgI64:
		return uint64(int64(v))
	case ArgU64:
		return uint64(v)
	case ArgF32:
		return uint64(math.Float32bits(float32(v)))
	}
	return math.Float64bits(v)
}

// constBits is a constant argument's bits for box, in its parameter's
// type.
func constBits(a ArgRef) uint64 {
	switch a.Kind {
	case ArgI64, ArgU64:
		return uint64(a.Const)
	case ArgF32:
		return uint64(math.Float32bits(float32(a.Const)))
	case ArgF64:
		return math.Float64bits(float64(a.Const))
	}
	return uint64(uint32(int32(a.Const)))
}

func (s *Session) scalar(name string, scal map[string]float64) (float64, error) {
	if v, ok := scal[name]; ok {
		return v, nil
	}
	if v, ok := s.env[name]; ok {
		return float64(v), nil
	}
	switch name {
	case LossScaleScalar:
		if s.scaler.on {
			return float64(s.scaler.scale), nil
		}
	case "train":
		if s.train {
			return 1, nil
		}
		return 0, nil
	}
	return 0, fmt.Errorf("no value for kernel scalar %q", name)
}

// alive returns an error once the session is closed: every method that
// touches the device checks it, so a closed model errs instead of using
// freed memory.
func (s *Session) alive(method string) error {
	if s == nil {
		// A zero generated Model holds no session: say so, not SIGSEGV.
		return fmt.Errorf("%s: the model was not made by New", method)
	}
	if s.closed {
		return fmt.Errorf("%s.%s: the model is closed", s.plan.Model, method)
	}
	return s.flushFor(method)
}
