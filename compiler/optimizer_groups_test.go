package compiler

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/dsl"
)

// groupedModel is a small model of every parameter kind the groups'
// Kinds select (linear, layernorm, embedding), with opt; line is the
// Optimizer call's file:line.
func groupedModel(opt dsl.Optimizer) (m *dsl.Model, line string) {
	m = dsl.NewModel("grouped")
	ids := m.Tokens("ids", dsl.Batch, 3)
	y := m.Tokens("y", dsl.Batch, 3)
	w := m.Param("tok.weight", dsl.F32, dsl.Normal(0, 1), 7, 8)
	h := m.LayerNorm("ln", dsl.Embed(w, ids))
	l := m.Linear("head", h, 7)
	m.Output(l)
	m.Loss(dsl.CrossEntropy(l, y))
	_, file, n, _ := runtime.Caller(0)
	m.Optimizer(opt)
	return m, fmt.Sprintf("%s:%d", file[strings.LastIndex(file, "compiler/"):], n+1)
}

// TestParamGroupsMembers: Kinds select by the declaring layer (an Embed
// table is an embedding), Names by name; the first group that matches
// takes a parameter and the rest are the default group, laid out last.
func TestParamGroupsMembers(t *testing.T) {
	m, _ := groupedModel(dsl.AdamW{LR: 1e-3, WeightDecay: 0.1, Groups: []dsl.ParamGroup{
		{Kinds: []string{"layernorm.*", "embedding.*"}, NoWeightDecay: true},
		{Names: []string{"*.bias"}, LRScale: 0.5, Beta2: 0.99},
	}})
	im, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(im, Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	gs := p.Plan.Optimizer.Groups
	got := fmt.Sprintf("%v | %v", gs[0].Params, gs[1].Params)
	if want := "[tok.weight ln.weight ln.bias] | [head.bias]"; got != want {
		t.Fatalf("members %s, want %s", got, want)
	}
	g0, g1 := gs[0], gs[1]
	if !g0.OwnDecay || g0.WeightDecay != 0 || g0.LRScale != 1 || g0.Beta2 != 0.999 {
		t.Errorf("group 0 options %+v: no decay, the rest inherited", g0)
	}
	if g1.OwnDecay || g1.WeightDecay != 0.1 || g1.LRScale != 0.5 || g1.Beta1 != 0.9 || g1.Beta2 != 0.99 {
		t.Errorf("group 1 options %+v: its rate and beta2, the optimizer's decay", g1)
	}
}

// TestParamGroupsErrors: a pattern that matches nothing, or a group whose
// every match an earlier group took, is an error at the user's Optimizer
// call naming the optimizer and the group; bad options and patterns are
// the DSL's errors at the same line.
func TestParamGroupsErrors(t *testing.T) {
	for _, c := range []struct {
		opt  dsl.Optimizer
		want string
	}{
		{dsl.AdamW{LR: 1e-3, Groups: []dsl.ParamGroup{{Names: []string{"*.bias", "blocks.*"}}}},
			`parameter group 0: name pattern "blocks.*" matches no parameter (the model has tok.weight, ln.weight, ln.bias, head.weight, head.bias)`},
		{dsl.Adam{LR: 1e-3, Groups: []dsl.ParamGroup{{Kinds: []string{"conv2d.*"}}}},
			`parameter group 0: kind pattern "conv2d.*" matches no parameter (the model has embedding.weight, layernorm.weight, layernorm.bias, linear.weight, linear.bias)`},
		{dsl.SGD{LR: 0.1, Groups: []dsl.ParamGroup{{Names: []string{"ln.*"}}, {Kinds: []string{"layernorm.bias"}}}},
			"parameter group 1: every parameter it matches is taken by an earlier group"},
		{dsl.AdamW{LR: 1e-3, Groups: []dsl.ParamGroup{{Names: []string{"[x"}}}}, `parameter group 0: pattern "[x": syntax error in pattern`},
		{dsl.AdamW{LR: 1e-3, Groups: []dsl.ParamGroup{{}}}, "parameter group 0: no Names or Kinds"},
		{dsl.SGD{LR: 0.1, Groups: []dsl.ParamGroup{{Names: []string{"*"}, Beta1: 0.5}}}, "parameter group 0: betas are Adam's and AdamW's"},
		{dsl.Adam{LR: 1e-3, Groups: []dsl.ParamGroup{{Names: []string{"*"}, Momentum: 0.5}}}, "parameter group 0: momentum is SGD's"},
		{dsl.Adam{LR: 1e-3, Groups: []dsl.ParamGroup{{Names: []string{"*"}, LRScale: -1}}}, "parameter group 0: LRScale must be ≥ 0"},
		{dsl.AdamW{LR: 1e-3, Groups: []dsl.ParamGroup{{Names: []string{"*"}, WeightDecay: 0.1, NoWeightDecay: true}}}, "NoWeightDecay with a WeightDecay"},
	} {
		m, line := groupedModel(c.opt)
		im, err := m.Build()
		if err == nil {
			_, err = Compile(im, Options{Fuse: true})
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), line) {
			t.Errorf("%+v: err = %v, want %q at %s", c.opt, err, c.want, line)
		}
	}
}
