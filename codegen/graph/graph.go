// Package graph draws a compiled training step as a Graphviz graph: what
// `ngen graph` renders. Each kernel (or GEMM) of the step is a cluster of
// the IR ops fused into it, labelled with its name, the bytes it moves, its
// FLOPs and its modeled GPU time (codegen.Report, the numbers of `ngen
// report -gpu`); colours tell GEMMs, elementwise kernels, reductions,
// attention and recurrences apart; edges between kernels go through global
// memory and carry the dtype and shape read; forward, backward and
// optimizer sit in three separate regions, and parameters are marked.
// Repeated layers are folded: a run of identical layers is drawn once, with
// its count (fold.go).
//
// It sits after the compiler and codegen in the pipeline (DSL → IR →
// passes → kernels → glue → runtime) and is pure: a program in, DOT bytes
// out. Render (render.go) runs Graphviz's dot on them.
package graph

import (
	"fmt"

	"github.com/ngen-ml/ngen/codegen"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// Options select what DOT draws.
type Options struct {
	// GPU is the GPU whose modeled time labels the kernels (a key of
	// codegen.GPUs); empty means h100.
	GPU string
	// GPUOptions are ngen report's -graphs and -tf32.
	GPUOptions codegen.GPUOptions
	// NoFold draws every layer instead of folding repeated ones.
	NoFold bool
}

// phase is the region of the picture a step belongs to.
type phase int

const (
	forward phase = iota
	backward
	optimizer
)

var phaseNames = [...]string{"forward", "backward", "optimizer update"}

// category picks a kernel's colour.
type category int

const (
	catGEMM category = iota
	catElementwise
	catReduction
	catAttention
	catRecurrence
	catMemory // memsets and copies
)

var catNames = [...]string{"GEMM", "elementwise", "reduction", "attention", "recurrence", "memset / copy"}

// step is one device call of the training step, with what the picture
// needs of it.
type step struct {
	index int
	st    *runtime.Step
	group *compiler.Group // nil for memsets, copies and builtin kernels
	label string          // runtime.StepLabel: the per-launch name
	phase phase
	cat   category
	row   codegen.StepRow
}

// model is the training step as the picture sees it.
type model struct {
	prog   *compiler.Program
	plan   *runtime.Plan
	report *codegen.Report
	steps  []step
	// owner maps a computed value to the step that computes it.
	owner map[*ir.Value]int
}

// DOT draws the training step of p as a Graphviz digraph.
func DOT(p *compiler.Program, o Options) ([]byte, error) {
	m, err := build(p, o)
	if err != nil {
		return nil, err
	}
	var f fold
	if !o.NoFold {
		f = findFolds(m)
	} else {
		f = noFold(len(m.steps))
	}
	return m.write(f), nil
}

func build(p *compiler.Program, o Options) (*model, error) {
	if p.Step == nil {
		return nil, fmt.Errorf("graph: model %s has no training step", p.Model.Name)
	}
	_, plan, err := codegen.Kernels(p)
	if err != nil {
		return nil, err
	}
	r, err := codegen.MakeReport(p)
	if err != nil {
		return nil, err
	}
	gpu := o.GPU
	if gpu == "" {
		gpu = "h100"
	}
	if err := r.ModelGPU(gpu, o.GPUOptions); err != nil {
		return nil, fmt.Errorf("graph: %v", err)
	}
	var fn *runtime.Func
	for i := range plan.Funcs {
		if plan.Funcs[i].Name == "step" {
			fn = &plan.Funcs[i]
		}
	}
	if fn == nil {
		return nil, fmt.Errorf("graph: internal error: the plan has no step function")
	}
	// The report models a new session's step, which leaves out steps that
	// run only on a condition (the grad-norm kernel while clipping is
	// off): such a step is drawn with an empty row, its label saying when
	// it runs.
	rows := make([]codegen.StepRow, len(fn.Steps))
	next := 0
	for i := range fn.Steps {
		st := &fn.Steps[i]
		if !plan.RunsAtStart(st.When) {
			rows[i] = codegen.StepRow{Kind: "launch", Label: runtime.StepLabel(plan, st) + " (" + st.When.String() + ")", Ops: st.Ops}
			if st.Kind == runtime.LaunchStep {
				rows[i].Kernel = plan.Kernels[st.Kernel].Name
			}
			continue
		}
		if next < len(r.Steps) {
			rows[i] = r.Steps[next]
		}
		next++
	}
	if next != len(r.Steps) {
		return nil, fmt.Errorf("graph: internal error: the plan's step function and the report disagree")
	}
	m := &model{prog: p, plan: plan, report: r, owner: map[*ir.Value]int{}}
	groups := map[int]*compiler.Group{}
	for _, g := range p.Groups[p.Step] {
		groups[g.Step] = g
		for _, v := range g.Values {
			m.owner[v] = g.Step
		}
	}
	for i := range fn.Steps {
		st := &fn.Steps[i]
		s := step{index: i, st: st, group: groups[i], label: runtime.StepLabel(plan, st), row: rows[i]}
		s.cat = categoryOf(st, s.group)
		s.phase = phaseOf(s.group, i, fn.UpdateFrom, st)
		m.steps = append(m.steps, s)
	}
	// Memsets and copies belong with the step they prepare: the next one.
	for i := len(m.steps) - 2; i >= 0; i-- {
		if s := &m.steps[i]; s.group == nil && s.st.Kind != runtime.LaunchStep && s.phase != optimizer {
			s.phase = m.steps[i+1].phase
		}
	}
	return m, nil
}

// categoryOf is the colour class of a step: by its group's template, and
// for loop kernels by what the op table says the root op is.
func categoryOf(st *runtime.Step, g *compiler.Group) category {
	switch st.Kind {
	case runtime.GemmStep:
		return catGEMM
	case runtime.MemsetStep, runtime.CopyStep:
		return catMemory
	}
	if g == nil {
		if gates(st) {
			return catReduction // it reduces every gradient (or new value) to one flag
		}
		return catElementwise
	}
	switch g.Kind {
	case compiler.Gemm:
		return catGEMM
	case compiler.Reduce, compiler.CE:
		return catReduction
	case compiler.Loop:
		if _, _, ok := ops.ScanWork(g.Root); ok {
			return catRecurrence
		}
		if _, ok := ops.AttentionFlops(g.Root); ok {
			return catAttention
		}
		return catReduction // layer norm, softmax: a reduction per row
	}
	return catElementwise
}

// gates: the guard and the update check, builtin kernels that reduce the
// gradients (or the update they would make) to a flag that lets the
// optimizer's update through or stops it.
func gates(st *runtime.Step) bool {
	return st.Builtin == runtime.GuardKernel || st.Builtin == runtime.UpdateCheckKernel
}

// phaseOf places a step: the optimizer's steps from the plan's update
// point on (and the guard and update check that gate them), backward where any member is
// a gradient or a recomputed activation, forward otherwise.
func phaseOf(g *compiler.Group, i, updateFrom int, st *runtime.Step) phase {
	if (updateFrom > 0 && i >= updateFrom) || gates(st) {
		return optimizer
	}
	ph := forward
	if g != nil {
		for _, v := range g.Values {
			switch v.Phase {
			case "opt":
				return optimizer
			case "bwd", "re":
				ph = backward
			}
		}
	}
	return ph
}
