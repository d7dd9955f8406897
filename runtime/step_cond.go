package runtime

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Conditional steps (Step.When): a step the plan holds but the session
// runs only in some states of a run, so that a feature compiled in and
// switched off at run time (gradient clipping, cmd/train -clip) launches
// nothing.

// String names the condition in graph keys and messages.
func (c StepCond) String() string {
	switch c {
	case Always:
		return "always"
	case WhileClipping:
		return "clipping"
	}
	return fmt.Sprintf("StepCond(%d)", int(c))
}

// runs reports whether a step with condition c runs now.
func (s *Session) runs(c StepCond) bool {
	switch c {
	case WhileClipping:
		return !math.IsInf(s.clip, 1)
	}
	return true
}

// condKey is the part of a step graph's key that f's conditional steps
// set: each condition f uses, and whether it holds now (" clipping=on").
// A device that replays graphs (runtime/cuda) thus keeps one graph per
// state, and toggling clipping between steps replays the other graph
// instead of re-capturing: the launches differ, so one graph cannot
// serve both.
func (s *Session) condKey(f *Func) string {
	var b strings.Builder
	var seen []StepCond
	for i := range f.Steps {
		c := f.Steps[i].When
		if c == Always || slices.Contains(seen, c) {
			continue
		}
		seen = append(seen, c)
		state := "off"
		if s.runs(c) {
			state = "on"
		}
		fmt.Fprintf(&b, " %s=%s", c, state)
	}
	return b.String()
}

// RunsAtStart reports whether a step with condition c runs in a new
// session of p, before any setter changes the run (ngen report models
// that step): the grad-norm kernel of a model compiled with clipping off
// (dsl.ClipGradNorm(math.Inf(1))) does not.
func (p *Plan) RunsAtStart(c StepCond) bool {
	switch c {
	case WhileClipping:
		return !math.IsInf(initialClipNorm(p.Optimizer), 1)
	}
	return true
}
