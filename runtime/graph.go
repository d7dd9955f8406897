package runtime

import (
	"fmt"
	"slices"
	"sort"
)

// Grapher is implemented by devices that can record the stream-ordered
// calls of a step once and replay them as one launch (runtime/cuda: CUDA
// graphs). Between BeginGraph and EndGraph the device may defer Launch,
// Gemm, Memset and CopyDevice; kernel argument values may differ from one
// replay to the next (a training step's do not: the scalars that change
// are in the device clock, clock.go), everything else must be what the
// key determines.
// EndGraph(false) issues what was deferred and captures nothing (the host
// side of the step failed).
type Grapher interface {
	BeginGraph(key string) error
	EndGraph(capture bool) error
}

// graphed runs run, the calls of function f at the current symbol
// bindings, as one graph on a Grapher device (not while profiling, which
// times each step). The key names the session (its buffers), the function,
// every binding and the state of each of f's step conditions (condKey:
// clipping on or off), which fix the kernels, launch shapes and GEMMs.
func (s *Session) graphed(f *Func, run func() error) error {
	g, ok := s.dev.(Grapher)
	if !ok || s.prof != nil {
		return run()
	}
	key := s.graphKey(f)
	if err := g.BeginGraph(key); err != nil {
		return err
	}
	err := run()
	if e := g.EndGraph(err == nil); err == nil && e != nil {
		err = fmt.Errorf("%s.%s: %w", s.plan.Model, f.Name, e)
	}
	return err
}

// graphKeys caches each function's graph key, per input set
// (pipeline_inputs.go), with what it was made of,
// so that a step with the bindings and conditions of the last makes no
// string (no allocation a step).
type graphKeys []graphKeyEntry

type graphKeyEntry struct {
	f     *Func
	syms  []string   // the bindings' symbols, sorted
	vals  []int      // their values
	conds []StepCond // f's step conditions but Always
	on    []bool     // whether each ran (Session.runs)
	pipe  bool       // a pipelined step's graph (pipeline.go)
	set   int        // the input set it reads (pipeline_inputs.go)
	key   string
}

// graphKey is graphed's key for f now.
func (s *Session) graphKey(f *Func) string {
	var e *graphKeyEntry
	set := s.pipe.in.cur
	for i := range s.graphKeys {
		if s.graphKeys[i].f == f && s.graphKeys[i].set == set {
			e = &s.graphKeys[i]
		}
	}
	if e == nil {
		s.graphKeys = append(s.graphKeys, graphKeyEntry{f: f, set: set})
		e = &s.graphKeys[len(s.graphKeys)-1]
		for i := range f.Steps {
			if c := f.Steps[i].When; c != Always && !slices.Contains(e.conds, c) {
				e.conds = append(e.conds, c)
			}
		}
		e.on = make([]bool, len(e.conds))
	}
	pipe := f.Name == "step" && s.pipelinable()
	same := e.key != "" && len(e.syms) == len(s.env) && e.pipe == pipe
	for i := 0; same && i < len(e.conds); i++ {
		same = s.runs(e.conds[i]) == e.on[i]
	}
	for i := 0; same && i < len(e.syms); i++ {
		v, ok := s.env[e.syms[i]]
		same = ok && v == e.vals[i]
	}
	if same {
		return e.key
	}
	e.syms = e.syms[:0]
	for y := range s.env {
		e.syms = append(e.syms, y)
	}
	sort.Strings(e.syms)
	e.vals = e.vals[:0]
	key := fmt.Sprintf("%s.%s@%p", s.plan.Model, f.Name, s)
	for _, y := range e.syms {
		e.vals = append(e.vals, s.env[y])
		key += fmt.Sprintf(" %s=%d", y, s.env[y])
	}
	for i, c := range e.conds {
		e.on[i] = s.runs(c)
	}
	e.pipe = pipe
	key += s.condKey(f)
	if pipe {
		key += " pipelined" // the verdict words cleared first
	}
	if e.set != 0 {
		key += " inputs=1" // the second set of inputs (pipeline_inputs.go)
	}
	e.key = key
	return key
}
