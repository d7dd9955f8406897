package runtime

import (
	"fmt"
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
	syms := make([]string, 0, len(s.env))
	for y := range s.env {
		syms = append(syms, y)
	}
	sort.Strings(syms)
	name := f.Name
	key := fmt.Sprintf("%s.%s@%p", s.plan.Model, name, s)
	for _, y := range syms {
		key += fmt.Sprintf(" %s=%d", y, s.env[y])
	}
	key += s.condKey(f)
	if err := g.BeginGraph(key); err != nil {
		return err
	}
	err := run()
	if e := g.EndGraph(err == nil); err == nil && e != nil {
		err = fmt.Errorf("%s.%s: %w", s.plan.Model, name, e)
	}
	return err
}
