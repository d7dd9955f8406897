package jit

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
)

// groupedAdamW is AdamW with the biases undecayed and the output layer at
// twice the rate with betas of its own (the PyTorch comparison is
// TestMLPOracle's *_groups cases).
var groupedAdamW = ir.Optimizer{Kind: "adamw", LR: 2e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.05, Groups: []ir.ParamGroup{
	{Names: []string{"*.bias"}, LRScale: 1, OwnDecay: true, Beta1: 0.9, Beta2: 0.999},
	{Names: []string{"out.*"}, LRScale: 2, WeightDecay: 0.05, Beta1: 0.8, Beta2: 0.99},
}}

// TestParamGroupsLayout: each group's parameters are one slice of the flat
// vectors, in declaration order with the default group last, and the
// update is one kernel per group (a multi-tensor update per group).
func TestParamGroupsLayout(t *testing.T) {
	p, err := compiler.Compile(irtest.DeepMLP(ir.F32, 12, 16, 2, 5, 0.2, groupedAdamW, 0), compiler.Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	gs := p.Plan.Optimizer.Groups
	if len(gs) != 2 || strings.Join(gs[0].Params, " ") != "fc1.bias fc2.bias out.bias" || strings.Join(gs[1].Params, " ") != "out.weight" {
		t.Fatalf("groups %+v", gs)
	}
	off := map[string]int64{}
	for _, b := range p.Plan.Buffers {
		if b.Role == "param" {
			off[b.Name] = b.Offset
		}
	}
	// A parameter takes the first group that matches: out.bias the first.
	if off["fc1.bias"] != 0 || off["fc2.bias"] != 16 || off["out.bias"] != 32 || off["out.weight"] != 37 || off["fc1.weight"] != 37+80 {
		t.Fatalf("layout %v", off)
	}
	if gs[1].Offset != 37 || gs[1].Elems != 80 {
		t.Fatalf("group 1 at %d+%d, want 37+80", gs[1].Offset, gs[1].Elems)
	}
	opt := 0
	for _, g := range p.Groups[p.Step] {
		for _, v := range g.Values {
			if v.Phase == "opt" {
				opt++
				break
			}
		}
	}
	if opt != 3 {
		t.Fatalf("%d update kernels, want one per group (3)", opt)
	}
}

// TestParamGroupsResume: with groups, a schedule and a run-time weight
// decay, a run saved mid-schedule and resumed in fresh sessions (which
// start from the model's decay: the file restores the run's) ends where
// the uninterrupted run ends, bit for bit.
func TestParamGroupsResume(t *testing.T) {
	r := newScheduleRig(t, groupedAdamW, warmupCosine)
	whole := r.session(r.sched)
	if err := whole.SetWeightDecay(0.2); err != nil {
		t.Fatal(err)
	}
	r.steps(whole, 11, nil)
	s := r.session(r.sched)
	if err := s.SetWeightDecay(0.2); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{2, 4, 5} {
		r.steps(s, n, nil)
		var buf bytes.Buffer
		if err := s.Save(&buf); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"ngen.weight_decay":"0.2"`, `"ngen.groups":"[{\"params\":[\"fc1.bias\",\"fc2.bias\",\"out.bias\"]`} {
			if !strings.Contains(buf.String(), want) {
				t.Fatalf("the checkpoint lacks %s", want)
			}
		}
		s = r.session(r.sched)
		if s.WeightDecay() != 0.05 {
			t.Fatalf("a fresh session's decay is %g, want the model's 0.05", s.WeightDecay())
		}
		if err := s.Load(&buf); err != nil {
			t.Fatal(err)
		}
		if s.WeightDecay() != 0.2 {
			t.Fatalf("the loaded decay is %g, want 0.2", s.WeightDecay())
		}
	}
	r.same("resumed", r.bits(s), r.bits(whole))
	// And the run-time decay mattered.
	k := r.session(r.sched)
	r.steps(k, 11, nil)
	if maps64Equal(r.bits(k), r.bits(whole)) {
		t.Fatal("SetWeightDecay changed nothing")
	}
}

// TestParamGroupsCheckpointMismatch: optimizer state saved under one
// grouping does not load into a model with another (other members, other
// options, or none), and says which group differs.
func TestParamGroupsCheckpointMismatch(t *testing.T) {
	r := newScheduleRig(t, groupedAdamW, warmupCosine)
	s := r.session(r.sched)
	r.steps(s, 2, nil)
	var buf bytes.Buffer
	if err := s.Save(&buf); err != nil {
		t.Fatal(err)
	}
	saved := buf.Bytes()
	other := func(o ir.Optimizer) *runtime.Session {
		p, err := compiler.Compile(irtest.DeepMLP(ir.F32, 12, 16, 2, 5, 0.2, o, 0), compiler.Options{Fuse: true})
		if err != nil {
			t.Fatal(err)
		}
		return r.session(p)
	}
	members := groupedAdamW
	members.Groups = []ir.ParamGroup{groupedAdamW.Groups[0], groupedAdamW.Groups[1]}
	members.Groups[0].Names = []string{"fc1.bias"}
	options := groupedAdamW
	options.Groups = []ir.ParamGroup{groupedAdamW.Groups[0], groupedAdamW.Groups[1]}
	options.Groups[1].LRScale = 3
	none := groupedAdamW
	none.Groups = nil
	for _, c := range []struct {
		name string
		opt  ir.Optimizer
		want string
	}{
		{"members", members, "parameter group 0 has members [fc1.bias fc2.bias out.bias], the model's [fc1.bias]"},
		{"options", options, "parameter group 1 has options"},
		{"no groups", none, "its optimizer has 2 parameter group(s), the model's 0"},
	} {
		err := other(c.opt).Load(bytes.NewReader(saved))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	// Saved without groups, loaded into a grouped model.
	plain := other(none)
	buf.Reset()
	if err := plain.Save(&buf); err != nil {
		t.Fatal(err)
	}
	if err := r.session(r.sched).Load(&buf); err == nil || !strings.Contains(err.Error(), "parameter group(s)") {
		t.Errorf("a file of no groups into a grouped model: err = %v", err)
	}
}
