package compiler

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

func TestLowerOptimizer(t *testing.T) {
	for _, tc := range []struct {
		opt          ir.Optimizer
		state, scals int // state buffers, runtime scalars
	}{
		{ir.Optimizer{Kind: "sgd", LR: 0.1}, 0, 1},
		{ir.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-4}, 1, 1},
		{adam, 2, 2},
		{ir.Optimizer{Kind: "adamw", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}, 2, 2},
	} {
		p := through(t, testMLP(6, 5, 3, 0, tc.opt), "lower optimizer", true)
		f := p.Step
		var state, scalars int
		for _, v := range f.Values {
			switch v.Role {
			case ir.State:
				state++
			case ir.Scalar:
				scalars++
			}
		}
		if state != tc.state {
			t.Errorf("%s: %d state buffers, want %d", tc.opt.Kind, state, tc.state)
		}
		if scalars < tc.scals {
			t.Errorf("%s: %d runtime scalars, want at least %d (lr, bias corrections)", tc.opt.Kind, scalars, tc.scals)
		}
		// Every state buffer and the flat parameter vector are written back.
		if len(f.Updates) != tc.state+1 {
			t.Errorf("%s: %d updates, want %d", tc.opt.Kind, len(f.Updates), tc.state+1)
		}
		for _, u := range f.Updates {
			if !u.State.Shape.Eq(u.New.Shape) || u.New.Phase != "opt" {
				t.Errorf("%s: update %s <- %s", tc.opt.Kind, u.State.LongString(), u.New.LongString())
			}
		}
	}
}
