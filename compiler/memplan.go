package compiler

import (
	"fmt"
	"maps"
	"slices"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// planMemory assigns storage to every value a kernel reads or writes and
// builds the runtime plan's steps:
//   - parameters are views into one persistent "params" vector, their
//     gradients views into one "grads" vector in the same order, and
//     optimizer state vectors match them, so the update is one kernel;
//   - an optimizer update writes its new value straight into the state it
//     replaces when no later kernel reads the old value, else a copy
//     follows;
//   - temporaries share one arena, reused by liveness (runtime.PlanArena),
//     and the peak is reported at the reference batch size.
//
// Launch steps are left for codegen to complete with their arguments and
// geometry, which the kernel templates decide.
func planMemory(p *Program) error {
	pl := &runtime.Plan{Model: p.Model.Name, Source: p.Model.Source, Fused: p.Fuse, Symbols: []string{"B"}}
	mp := &memPlanner{p: p, plan: pl, bufOf: map[*ir.Value]int{}, named: map[string]int{}}
	order := p.Step.Params()
	if o := p.Model.Optimizer; o != nil {
		groups, err := paramGroups(p.Model, order, p.Step.Unreached)
		if err != nil {
			return err
		}
		pl.Optimizer = planOptimizer(o, groups)
		if pr := p.Model.Precision; pr != nil && pr.Scaler != nil {
			sc := pr.Scaler
			pl.Optimizer.Scaler = &runtime.LossScaler{InitScale: sc.Init, GrowthFactor: sc.Growth, BackoffFactor: sc.Backoff, GrowthInterval: sc.Interval}
		}
		order = slices.Concat(groups...)
	}
	mp.layoutParams(order)
	for fi, f := range p.Funcs() {
		if err := mp.fn(fi, f); err != nil {
			return err
		}
	}
	p.Plan = pl
	p.BufOf = mp.bufOf
	p.PeakBytes = planPeak(pl, p.RefBatch)
	p.ActivationBytes = gradArena(pl, p.RefBatch)
	return nil
}

// gradArena is the arena the step's gradient phase needs at batch.
func gradArena(pl *runtime.Plan, batch int) int64 {
	if len(pl.Funcs) == 0 {
		return 0
	}
	env := map[string]int{"B": batch}
	from := pl.Funcs[0].UpdateFrom
	var sizes []int64
	var live [][2]int
	for _, b := range pl.Buffers {
		if b.Placement == runtime.Arena && b.Func == 0 && b.Live[0] < from {
			sizes = append(sizes, b.Elems.Eval(env)*int64(b.DType.Size()))
			live = append(live, b.Live)
		}
	}
	_, total := runtime.PlanArena(sizes, live)
	return total
}

// planPeak is the persistent storage plus the largest function arena.
func planPeak(pl *runtime.Plan, batch int) int64 {
	env := map[string]int{"B": batch}
	var persist, arena int64
	for _, b := range pl.Buffers {
		if b.Placement == runtime.Persistent {
			persist += align(b.Elems.Eval(env) * int64(b.DType.Size()))
		}
	}
	for fi := range pl.Funcs {
		var sizes []int64
		var live [][2]int
		for _, b := range pl.Buffers {
			if b.Placement == runtime.Arena && b.Func == fi {
				sizes = append(sizes, b.Elems.Eval(env)*int64(b.DType.Size()))
				live = append(live, b.Live)
			}
		}
		if _, total := runtime.PlanArena(sizes, live); total > arena {
			arena = total
		}
	}
	return persist + arena
}

func align(n int64) int64 { return (n + runtime.Align - 1) / runtime.Align * runtime.Align }

type memPlanner struct {
	p      *Program
	plan   *runtime.Plan
	bufOf  map[*ir.Value]int // per function values; maps are disjoint
	named  map[string]int    // role:name → persistent buffer
	params int               // the "params" vector
	grads  int               // the "grads" vector
	offset map[string]int64  // param name → element offset
	// copySrc are update copies still to append after the last kernel.
	copySrc []pendingCopy
	// codes numbers the checked ops (op and line) in the status word, the
	// same in every function, so kernels they share stay identical.
	codes map[string]int
}

// statusBuf is the status block, created once for all functions (see
// runtime.StatusWords for its layout).
func (m *memPlanner) statusBuf() int {
	return m.persistent("status", "status", ir.I32, ir.Static(runtime.StatusWords))
}

// statusCode is the status-word code of the checked op at pos.
func (m *memPlanner) statusCode(op, pos string) int {
	if m.codes == nil {
		m.codes = map[string]int{}
	}
	key := op + " " + pos
	if c, ok := m.codes[key]; ok {
		return c
	}
	m.codes[key] = len(m.codes) + 1
	return m.codes[key]
}

func rtDType(d ir.DType) runtime.DType {
	switch d {
	case ir.F64:
		return runtime.F64
	case ir.I32:
		return runtime.I32
	case ir.BF16:
		return runtime.BF16
	case ir.F16:
		return runtime.F16
	}
	return runtime.F32
}

func rtSize(s ir.Shape) runtime.Size {
	z := s.Size()
	return runtime.Size{Mul: z.N, Syms: z.Syms}
}

// flatView is the buffer of a flat view of parameters or of their
// gradients, laid out back to back: the whole vector, or (a parameter
// group's) a view of its slice.
func (m *memPlanner) flatView(v *ir.Value) int {
	vec := m.grads
	if v.Args[0].Role == ir.Param {
		vec = m.params
	}
	name := func(a *ir.Value) string {
		if a.Role == ir.Param {
			return a.Name
		}
		for n, g := range m.p.Step.Grads {
			if base(g) == base(a) {
				return n
			}
		}
		return ""
	}
	first := m.offset[name(v.Args[0])]
	at := first
	for _, a := range v.Args {
		if n := name(a); n == "" || m.offset[n] != at {
			panic("internal error: flat view of values not laid out back to back: " + v.LongString())
		} else {
			at += a.Shape.Size().N
		}
	}
	if first == 0 && at == m.plan.Buffers[vec].Elems.Mul {
		return vec
	}
	key := fmt.Sprintf("view:%d@%d+%d", vec, first, at-first)
	if i, ok := m.named[key]; ok {
		return i
	}
	i := m.add(runtime.Buffer{Name: fmt.Sprintf("%s[%d:%d]", m.plan.Buffers[vec].Name, first, at), Role: "view", DType: rtDType(v.DType),
		Elems: rtSize(v.Shape), Placement: runtime.Alias, AliasOf: vec, Offset: first, Shape: v.Type()})
	m.named[key] = i
	return i
}

// segmentView is the buffer of a segment of an optimizer state vector.
func (m *memPlanner) segmentView(v *ir.Value) int {
	st := v.Args[0]
	if st.Role != ir.State {
		panic("internal error: segment of a value that is not state: " + v.LongString())
	}
	vec := m.persistent("state", st.Name, st.DType, st.Shape)
	off := int64(v.Attrs.Ints[0])
	key := fmt.Sprintf("view:%d@%d+%d", vec, off, v.Shape.Size().N)
	if i, ok := m.named[key]; ok {
		return i
	}
	i := m.add(runtime.Buffer{Name: fmt.Sprintf("%s[%d:%d]", st.Name, off, off+v.Shape.Size().N), Role: "view", DType: rtDType(v.DType),
		Elems: rtSize(v.Shape), Placement: runtime.Alias, AliasOf: vec, Offset: off, Shape: v.Type()})
	m.named[key] = i
	return i
}

func (m *memPlanner) add(b runtime.Buffer) int {
	m.plan.Buffers = append(m.plan.Buffers, b)
	return len(m.plan.Buffers) - 1
}

// persistent returns the buffer for a role and name, creating it once for
// all functions.
func (m *memPlanner) persistent(role, name string, dt ir.DType, shape ir.Shape) int {
	key := role + ":" + name
	if i, ok := m.named[key]; ok {
		return i
	}
	i := m.add(runtime.Buffer{Name: name, Role: role, DType: rtDType(dt), Elems: rtSize(shape), Placement: runtime.Persistent, Shape: dt.String() + shape.String()})
	m.named[key] = i
	return i
}

// layoutParams lays out every parameter, and its gradient, back to back
// in the order given: each optimizer group's contiguously.
func (m *memPlanner) layoutParams(ps []*ir.Value) {
	var total int64
	m.offset = map[string]int64{}
	for _, v := range ps {
		m.offset[v.Name] = total
		total += v.Shape.Size().N
	}
	dt := ir.F32
	if len(ps) > 0 {
		dt = ps[0].DType
	}
	m.plan.DType = rtDType(dt)
	m.params = m.persistent("params", "params", dt, ir.Static(int(total)))
	m.grads = m.persistent("grads", "grads", dt, ir.Static(int(total)))
	for _, v := range ps {
		i := m.add(runtime.Buffer{Name: v.Name, Role: "param", DType: rtDType(v.DType), Elems: rtSize(v.Shape),
			Placement: runtime.Alias, AliasOf: m.params, Offset: m.offset[v.Name], Init: parseInit(v.Attrs.Init), Shape: v.Type()})
		m.named["param:"+v.Name] = i
		j := m.add(runtime.Buffer{Name: v.Name, Role: "grad", DType: rtDType(v.DType), Elems: rtSize(v.Shape),
			Placement: runtime.Alias, AliasOf: m.grads, Offset: m.offset[v.Name], Shape: v.Type()})
		m.named["grad:"+v.Name] = j
	}
}

func parseInit(s string) runtime.Init {
	var in runtime.Init
	if s == "" {
		return in
	}
	var kind string
	var a, b float64
	n, _ := fmt.Sscanf(replaceColons(s), "%s %g %g", &kind, &a, &b)
	if n >= 1 {
		in = runtime.Init{Kind: kind, A: a, B: b}
	}
	return in
}

func replaceColons(s string) string {
	out := []byte(s)
	for i := range out {
		if out[i] == ':' {
			out[i] = ' '
		}
	}
	return string(out)
}

func (m *memPlanner) fn(fi int, f *ir.Func) error {
	groups := m.p.Groups[f]
	rf := runtime.Func{Name: f.Name}
	owner := map[*ir.Value]*Group{}
	for _, g := range groups {
		for _, v := range g.Values {
			owner[v] = g
		}
	}
	// Forced placements: gradients into the grads vector, updates into
	// their state when safe.
	forced := map[*ir.Value]int{}
	for _, prm := range f.Params() {
		g, ok := f.Grads[prm.Name]
		if !ok {
			continue
		}
		dst := m.named["grad:"+prm.Name]
		b := base(g)
		if _, taken := forced[b]; taken || owner[b] == nil || b.Op == "flat" {
			return fmt.Errorf("internal error: gradient of %q has no storage of its own", prm.Name)
		}
		forced[b] = dst
	}
	groupIndex := map[*Group]int{}
	for i, g := range groups {
		groupIndex[g] = i
	}
	lastReader := func(s *ir.Value) int {
		last := -1
		for _, g := range groups {
			for _, in := range g.Inputs {
				for _, st := range storageOf(in) {
					if st == s || (s.Op == "flat" && containsArg(s, st)) {
						if gi := groupIndex[g]; gi > last {
							last = gi
						}
					}
				}
			}
		}
		return last
	}
	// A training step is transactional (guard.go): state the forward pass
	// updates (batch norm's running statistics) is committed by a guarded
	// copy after the checks, never written in place.
	_, guarded := f.Outputs["loss"]
	guarded = guarded && len(f.Updates) > 0
	for _, u := range f.Updates {
		var dst int
		switch u.State.Op {
		case "flat":
			dst = m.flatView(u.State)
		case "segment":
			dst = m.segmentView(u.State)
		default:
			dst = m.persistent("state", u.State.Name, u.State.DType, u.State.Shape)
		}
		nb := base(u.New)
		w := owner[nb]
		safe := w != nil && forced[nb] == 0 && w.Kind == EW && w.Space.Eq(u.State.Shape) && (isOpt(u) || !guarded)
		if safe {
			wi := groupIndex[w]
			for _, s := range append([]*ir.Value{u.State}, u.State.Args...) {
				if lastReader(s) > wi {
					safe = false
				}
			}
			if _, ok := forced[nb]; ok {
				safe = false
			}
		}
		if safe {
			forced[nb] = dst
			continue
		}
		m.copySrc = append(m.copySrc, pendingCopy{u.New, &runtime.Step{Kind: runtime.CopyStep, Buf: dst, Ops: "copy " + u.State.Name}, isOpt(u)})
	}
	// Storage for every value kernels touch.
	steps := []runtime.Step{}
	bufFor := func(v *ir.Value) int {
		if i, ok := m.bufOf[v]; ok {
			return i
		}
		var i int
		switch {
		case v.Role == ir.Input:
			i = m.persistent("input", v.Name, v.DType, v.Shape)
			m.plan.Buffers[i].Bound = inputBound(m.p, v.Name)
			if v.Pos.File != "" {
				m.plan.Buffers[i].Pos = v.Pos.String()
			}
		case v.Role == ir.Param:
			i = m.named["param:"+v.Name]
		case v.Role == ir.State:
			i = m.persistent("state", v.Name, v.DType, v.Shape)
			if v.Attrs.Init != "" {
				m.plan.Buffers[i].Init = parseInit(v.Attrs.Init) // declared state (running statistics); optimizer state starts at zero
			}
		default:
			panic("bufFor: " + v.LongString())
		}
		m.bufOf[v] = i
		return i
	}
	var resolve func(v *ir.Value) int
	resolve = func(v *ir.Value) int {
		if i, ok := m.bufOf[v]; ok {
			return i
		}
		switch {
		case v.Role != ir.Temp:
			return bufFor(v)
		case v.Op == "reshape":
			i := m.add(runtime.Buffer{Name: fmt.Sprintf("%s.v%d", f.Name, v.ID), Role: "view", DType: rtDType(v.DType), Elems: rtSize(v.Shape),
				Placement: runtime.Alias, AliasOf: resolve(v.Args[0]), Shape: v.Type()})
			m.bufOf[v] = i
			return i
		case v.Op == "flat":
			m.bufOf[v] = m.flatView(v)
			return m.bufOf[v]
		case v.Op == "segment":
			m.bufOf[v] = m.segmentView(v)
			return m.bufOf[v]
		}
		if dst, ok := forced[v]; ok {
			m.bufOf[v] = dst
			return dst
		}
		i := m.add(runtime.Buffer{Name: fmt.Sprintf("%s.v%d", f.Name, v.ID), Role: "temp", DType: rtDType(v.DType), Elems: rtSize(v.Shape),
			Placement: runtime.Arena, Func: fi, Live: [2]int{-1, -1}, Shape: v.Type()})
		m.bufOf[v] = i
		return i
	}
	// Outputs the caller reads live in persistent buffers, numbered in
	// name order so that generation is deterministic.
	for _, name := range slices.Sorted(maps.Keys(f.Outputs)) {
		v := f.Outputs[name]
		b := base(v)
		if _, ok := forced[b]; !ok && b.Role == ir.Temp {
			i := m.persistent("output", name+"."+f.Name, v.DType, v.Shape)
			m.plan.Buffers[i].Name = name
			forced[b] = i
		}
	}
	touch := func(buf, step int) {
		b := &m.plan.Buffers[buf]
		for b.Placement == runtime.Alias {
			buf = b.AliasOf
			b = &m.plan.Buffers[buf]
		}
		if b.Placement != runtime.Arena {
			return
		}
		if b.Live[0] < 0 || step < b.Live[0] {
			b.Live[0] = step
		}
		if step > b.Live[1] {
			b.Live[1] = step
		}
	}
	var status = -1
	if guarded {
		status = m.statusBuf()
	}
	// The optimizer's kernels come last, after every copy that is not the
	// optimizer's: steps before UpdateFrom are the gradient phase
	// (Session.RunGrads), the rest the update phase (Session.RunUpdate).
	rf.UpdateFrom = -1
	flush := func(opt bool) {
		rest := m.copySrc[:0]
		var commits []runtime.Step
		for _, c := range m.copySrc {
			if c.opt != opt {
				rest = append(rest, c)
				continue
			}
			c.step.Src = resolve(c.v)
			touch(c.step.Src, len(steps))
			if guarded {
				commits = append(commits, *c.step)
				continue
			}
			steps = append(steps, *c.step)
		}
		if len(commits) > 0 {
			steps = append(steps, commitStep(commits, m.plan.Buffers))
		}
		m.copySrc = rest
	}
	for _, g := range groups {
		if groupIsOpt(g) && rf.UpdateFrom < 0 {
			if guarded {
				steps = append(steps, m.guardStep(f, status, resolve, touch, len(steps)))
			}
			flush(false)
			rf.UpdateFrom = len(steps)
			if m.plan.Optimizer.GradNorm() {
				if !guarded {
					return fmt.Errorf("internal error: %s: ClipGradNorm needs the guarded step's status block", f.Name)
				}
				steps = append(steps, m.gradNormStep(status))
			}
			if guarded {
				steps = append(steps, m.updateCheckStep(status))
			}
		} else if !groupIsOpt(g) && rf.UpdateFrom >= 0 {
			return fmt.Errorf("internal error: %s: kernel %s of the gradient phase follows the optimizer update", f.Name, g)
		}
		bytes := groupBytes(g)
		flops := groupFlops(g, m.p.TensorForm)
		if g.Kind == CE && g.Loss != nil && contains(g.Outputs, g.Loss) {
			// The loss is accumulated atomically by the kernel's blocks.
			lb := resolve(g.Loss)
			steps = append(steps, runtime.Step{Kind: runtime.MemsetStep, Buf: lb, Ops: "zero " + g.Loss.String()})
		}
		if g.SumBatch != nil {
			// The GEMM accumulates the batch's products into the sum; its
			// storage is live from the memset on.
			touch(resolve(g.SumBatch), len(steps))
			steps = append(steps, runtime.Step{Kind: runtime.MemsetStep, Buf: resolve(g.SumBatch), Ops: "zero " + g.SumBatch.String()})
		}
		st := runtime.Step{Kind: runtime.LaunchStep, Ops: g.Ops(), Flops: flops, TensorFlops: groupTensorFlops(g, m.p.TensorForm), Bytes: bytes}
		if g.Kind == Gemm {
			st.Kind = runtime.GemmStep
		}
		idx := len(steps)
		for _, v := range g.Inputs {
			touch(resolve(v), idx)
		}
		for _, v := range g.Outputs {
			touch(resolve(v), idx)
		}
		if g.Kind == CE {
			if status < 0 {
				status = m.statusBuf()
			}
			pos := g.Root.Pos.String()
			m.plan.Checks = append(m.plan.Checks, runtime.Check{Func: f.Name, Kind: "status", Buf: status, Op: "cross_entropy", Pos: pos, Code: m.statusCode("cross_entropy", pos)})
		}
		for _, v := range g.Values {
			if d := ops.Lookup(v.Op); d.Status != "" {
				if status < 0 {
					status = m.statusBuf()
				}
				pos := v.Pos.String()
				m.plan.Checks = append(m.plan.Checks, runtime.Check{Func: f.Name, Kind: "status", Buf: status, Op: v.Op, Pos: pos, Detail: d.Status, Code: m.statusCode(v.Op, pos)})
			}
		}
		g.Step = idx
		steps = append(steps, st)
	}
	if rf.UpdateFrom < 0 {
		if guarded {
			steps = append(steps, m.guardStep(f, status, resolve, touch, len(steps)))
		}
		flush(false)
		rf.UpdateFrom = 0 // no optimizer: predict

	}
	flush(true)
	if guarded && rf.UpdateFrom > 0 {
		steps = append(steps, m.clockStep(status))
	}
	if err := checkPhases(m.plan, fi, rf.UpdateFrom, len(steps)); err != nil {
		return fmt.Errorf("internal error: %s: %w", f.Name, err)
	}
	if l, ok := f.Outputs["loss"]; ok && guarded {
		m.plan.Checks = append(m.plan.Checks, runtime.Check{Func: f.Name, Kind: "guard", Buf: status, Op: l.Op, Pos: l.Pos.String(), Detail: "loss"})
	} else if ok {
		m.plan.Checks = append(m.plan.Checks, runtime.Check{Func: f.Name, Kind: "finite", Buf: resolve(l), Op: l.Op, Pos: l.Pos.String(), Detail: "loss"})
	}
	for name, v := range f.Outputs {
		rf.Outputs = append(rf.Outputs, runtime.Named{Name: name, Buf: resolve(v)})
	}
	sortNamed(rf.Outputs)
	for _, v := range f.Inputs() {
		rf.Inputs = append(rf.Inputs, runtime.Named{Name: v.Name, Buf: bufFor(v)})
	}
	// An arena buffer written but never read still needs its slot.
	for i := range m.plan.Buffers {
		b := &m.plan.Buffers[i]
		if b.Placement == runtime.Arena && b.Func == fi && b.Live[0] < 0 {
			b.Live = [2]int{0, len(steps)}
		}
	}
	rf.Steps = steps
	m.plan.Funcs = append(m.plan.Funcs, rf)
	return nil
}

type pendingCopy struct {
	v    *ir.Value
	step *runtime.Step
	opt  bool // the optimizer's state, copied in the update phase
}

// isOpt reports whether an update belongs to the optimizer (made by the
// "lower optimizer" pass) rather than the forward pass (batch norm's
// running statistics, which change with every micro-batch).
func isOpt(u ir.Update) bool { return u.State.Phase == "opt" || u.New.Phase == "opt" }

func groupIsOpt(g *Group) bool {
	for _, v := range g.Values {
		if v.Phase == "opt" {
			return true
		}
	}
	return false
}

// checkPhases rejects an arena buffer alive across the boundary between a
// function's gradient and update phases: other functions (accumulation
// between micro-batches, predict) may reuse the arena in between.
func checkPhases(pl *runtime.Plan, fi, from, n int) error {
	if from <= 0 || from >= n {
		return nil
	}
	for _, b := range pl.Buffers {
		if b.Placement == runtime.Arena && b.Func == fi && b.Live[0] < from && b.Live[1] >= from {
			return fmt.Errorf("temporary %s is alive across the gradient/update boundary (steps %d..%d, update from %d)", b.Name, b.Live[0], b.Live[1], from)
		}
	}
	return nil
}

func containsArg(v, a *ir.Value) bool {
	for _, x := range v.Args {
		if x == a {
			return true
		}
	}
	return false
}

func contains(vs []*ir.Value, v *ir.Value) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// groupBytes is what a kernel moves: its inputs read and its outputs
// written, in full, except an input the kernel only slices, of which it
// reads what the slices keep (a LayerNorm's shift x[..., 0:1] reads one
// element a row, not the row).
func groupBytes(g *Group) runtime.Sum {
	var bytes runtime.Sum
	for _, v := range g.Inputs {
		if sl, ok := onlySliced(g, v); ok {
			for _, u := range sl {
				bytes = append(bytes, sliceReadBytes(u))
			}
			continue
		}
		bytes = append(bytes, valueBytes(v))
	}
	for _, v := range g.Outputs {
		bytes = append(bytes, valueBytes(v))
	}
	return bytes
}

// valueBytes is the size of v's storage.
func valueBytes(v *ir.Value) runtime.Size {
	z := rtSize(v.Shape)
	z.Mul *= int64(v.DType.Size())
	return z
}

// onlySliced returns the slices of v among g's values when they are all
// that g does with v.
func onlySliced(g *Group, v *ir.Value) ([]*ir.Value, bool) {
	if contains(g.Outputs, v) {
		return nil, false
	}
	var sl []*ir.Value
	for _, u := range g.Values {
		for _, a := range u.Args {
			if a != v {
				continue
			}
			if u.Op != "slice" {
				return nil, false
			}
			sl = append(sl, u)
			break
		}
	}
	return sl, len(sl) > 0
}

// sectorBytes is the DRAM's access granularity: a run of fewer bytes
// costs a whole sector.
const sectorBytes = 32

// sliceReadBytes is what slice u reads of its operand: its result, in
// runs of the kept width times the axes after it, each at least a sector.
func sliceReadBytes(u *ir.Value) runtime.Size {
	z, size := valueBytes(u), int64(u.DType.Size())
	ax, err := ir.NormAxes(u.Attrs.Axes, len(u.Shape))
	if err != nil || len(ax) != 1 {
		return z
	}
	run := u.Shape[ax[0]:].Size()
	if len(run.Syms) > 0 || run.N == 0 || run.N*size >= sectorBytes {
		return z
	}
	z.Mul = z.Mul / (run.N * size) * sectorBytes
	return z
}

// groupTensorFlops is the share of groupFlops that a kernel's GPU form
// runs on tensor cores (attention's tensor-core form, where form takes
// it), for the report's time model.
func groupTensorFlops(g *Group, form ops.TensorForm) runtime.Sum {
	var sum runtime.Sum
	for _, v := range g.Values {
		if tensor, _, ok := tensorWork(v, form); ok {
			z := rtSize(ir.Shape{v.Shape[0]})
			z.Mul *= tensor
			sum = append(sum, z)
		}
	}
	return sum
}

// tensorWork is ops.AttentionTensorWork where form takes v's tensor-core
// form.
func tensorWork(v *ir.Value, form ops.TensorForm) (tensor, core int64, ok bool) {
	if _, ok := form.Use(ops.Lookup(v.Op), v); !ok {
		return 0, 0, false
	}
	return ops.AttentionTensorWork(v)
}

func groupFlops(g *Group, form ops.TensorForm) runtime.Sum {
	if g.Kind == Gemm {
		v := g.Root
		_, k := ops.MatDims(v.Args[0].Shape, v.Attrs.TransA)
		z := rtSize(append(v.Shape.Clone(), k))
		z.Mul *= 2
		return runtime.Sum{z}
	}
	var sum runtime.Sum
	if T, product, ok := ops.ScanWork(g.Root); g.Kind == Loop && ok {
		// The recurrent product at every step of every sequence.
		z := rtSize(ir.Shape{g.Root.Shape[0]})
		z.Mul *= int64(T) * product
		sum = append(sum, z)
	}
	for _, v := range g.Values {
		if tensor, core, ok := tensorWork(v, form); ok {
			// The products and the softmax between them (on the GPU:
			// tensor cores and CUDA cores; groupTensorFlops).
			z := rtSize(ir.Shape{v.Shape[0]})
			z.Mul *= tensor + core
			sum = append(sum, z)
			continue
		}
		if per, ok := ops.AttentionFlops(v); ok {
			// Work grows with Tq·Tk, not with the result (attention_work.go).
			z := rtSize(ir.Shape{v.Shape[0]})
			z.Mul *= per
			sum = append(sum, z)
			continue
		}
		d := ops.Lookup(v.Op)
		s := v.Shape
		if d.Kind == ops.Reduce || d.Kind == ops.Special {
			s = g.Space
		}
		z := rtSize(s)
		z.Mul *= int64(d.Flops)
		if z.Mul != 0 {
			sum = append(sum, z)
		}
	}
	return sum
}

func sortNamed(ns []runtime.Named) {
	for i := 1; i < len(ns); i++ {
		for j := i; j > 0 && ns[j].Name < ns[j-1].Name; j-- {
			ns[j], ns[j-1] = ns[j-1], ns[j]
		}
	}
}
