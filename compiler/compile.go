// Package compiler turns a declared model into kernels and a runtime plan
// through an ordered list of passes, in the manner of the Go compiler's
// ssa/compile.go: each pass has a name and a file of its own, the IR can be
// dumped after any of them, and a verifier runs between them.
//
// Pipeline: DSL → IR → passes (this package) → kernels → glue → runtime.
package compiler

import (
	"fmt"
	"io"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

type pass struct {
	name     string
	fn       func(p *Program) error
	required bool // runs even when optimisations are off
}

// passes is the pipeline, in order.
var passes = []pass{
	{name: "infer shapes", fn: inferShapes, required: true},
	{name: "pool first", fn: poolFirst},
	{name: "residual norm", fn: residualNorm},
	{name: "project embedding", fn: projectEmbedding},
	{name: "expand fused ops", fn: expandFused, required: true},
	{name: "autocast", fn: autocast, required: true},
	{name: "derive functions", fn: deriveFuncs, required: true},
	{name: "autodiff", fn: autodiff, required: true},
	{name: "lower optimizer", fn: lowerOptimizer, required: true},
	{name: "fold constants", fn: foldConstants, required: true},
	{name: "prune", fn: prune, required: true},
	{name: "recompute", fn: recompute, required: true},
	{name: "recast", fn: recast, required: true},
	{name: "f32 weight grads", fn: f32WeightGrads, required: true},
	{name: "fold norm casts", fn: foldNormCasts},
	{name: "fold sum casts", fn: foldSumCasts},
	{name: "fuse", fn: fuse, required: true},
	{name: "plan memory", fn: planMemory, required: true},
}

// passOrder lists constraints "a before b", checked at init.
var passOrder = [][2]string{
	{"infer shapes", "autodiff"},
	{"infer shapes", "pool first"},
	{"pool first", "derive functions"},
	{"infer shapes", "expand fused ops"},
	{"infer shapes", "residual norm"},
	{"residual norm", "derive functions"},
	{"infer shapes", "project embedding"},
	{"project embedding", "derive functions"},
	{"expand fused ops", "derive functions"},
	{"expand fused ops", "autocast"},
	{"pool first", "autocast"},
	{"residual norm", "autocast"},
	{"project embedding", "autocast"},
	{"autocast", "derive functions"},
	{"derive functions", "autodiff"},
	{"autodiff", "lower optimizer"},
	{"lower optimizer", "fuse"},
	{"autodiff", "fold constants"},
	{"fold constants", "fuse"},
	{"fuse", "plan memory"},
	{"prune", "recompute"},
	{"recompute", "fuse"},
	{"recompute", "recast"},
	{"recast", "fuse"},
	{"recast", "fold norm casts"},
	{"autodiff", "f32 weight grads"},
	{"recompute", "f32 weight grads"},
	{"f32 weight grads", "fuse"},
	{"fold norm casts", "fuse"},
	{"recast", "fold sum casts"},
	{"fold sum casts", "fuse"},
}

func init() {
	if err := checkOrder(passes, passOrder); err != nil {
		panic(err)
	}
}

// checkOrder reports the first constraint "a before b" that ps breaks,
// including one that names a pass ps lacks (a renamed pass must not
// silently drop its constraints).
func checkOrder(ps []pass, order [][2]string) error {
	at := map[string]int{}
	for i, p := range ps {
		at[p.name] = i
	}
	for _, c := range order {
		a, ok1 := at[c[0]]
		b, ok2 := at[c[1]]
		if !ok1 || !ok2 || a >= b {
			return fmt.Errorf("compiler: pass %q must run before %q", c[0], c[1])
		}
	}
	return nil
}

// PassNames lists the passes in order, with the names -dump accepts.
func PassNames() []string {
	var out []string
	for _, p := range passes {
		out = append(out, dumpName(p.name))
	}
	return out
}

func dumpName(n string) string { return strings.ReplaceAll(n, " ", "_") }

// Options controls compilation.
type Options struct {
	// Fuse enables fusion; false emits one kernel per primitive op.
	Fuse bool
	// Dump names a pass (spaces as underscores, or a prefix such as
	// "fuse") after which to print the IR, or "all".
	Dump   string
	DumpTo io.Writer
	// RefBatch is the batch size at which memory is planned for the
	// report (the runtime plans again for its own batch size).
	RefBatch int
	// MemoryBudget > 0 lets the compiler checkpoint forward segments
	// (recompute them in backward) until the planned peak at RefBatch
	// fits in this many bytes (checkpoint_budget.go).
	MemoryBudget int64
	// AMP overrides the model's mixed-precision policy (amp_option.go);
	// the zero value keeps it.
	AMP AMP
	// StepForm chooses the GPU form of loops that have a stepped one (a
	// recurrence: a time step a launch, or the whole loop in one); the
	// zero value lets each op choose by its size.
	StepForm ops.StepForm
	// TensorForm chooses whether ops with a tensor-core GPU form (16-bit
	// attention) take it; the zero value takes it wherever it exists.
	TensorForm ops.TensorForm
	// Off names optional passes (as -dump spells them) to skip, as the Go
	// compiler's -d=ssa/PASS/off does: for tests that compare a pass's
	// output with the plan it rewrote, and for bisecting a miscompile.
	Off []string
}

// Compile runs every pass over the model, choosing checkpoints first
// when a memory budget asks for them.
func Compile(m *ir.Model, opts Options) (*Program, error) {
	if opts.RefBatch <= 0 {
		opts.RefBatch = 128
	}
	m = withAMP(m, opts.AMP)
	if err := checkBounds(m, opts); err != nil {
		return nil, err
	}
	if opts.MemoryBudget > 0 {
		var err error
		if m, err = withinBudget(m, opts); err != nil {
			return nil, err
		}
	}
	p, err := compile(m, opts)
	if err != nil {
		return nil, err
	}
	if err := noteWithout(p, m, opts); err != nil {
		return nil, err
	}
	return p, noteF32(p, m, opts)
}

func compile(m *ir.Model, opts Options) (*Program, error) {
	if opts.Dump != "" && opts.Dump != "all" {
		found := false
		for _, p := range passes {
			if strings.HasPrefix(dumpName(p.name), opts.Dump) {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("-dump=%s: no such pass (passes: %s)", opts.Dump, strings.Join(PassNames(), ", "))
		}
	}
	off := map[string]bool{}
	for _, name := range opts.Off {
		ok := false
		for _, ps := range passes {
			if dumpName(ps.name) == name {
				if ps.required {
					return nil, fmt.Errorf("pass %s cannot be turned off", name)
				}
				ok = true
			}
		}
		if !ok {
			return nil, fmt.Errorf("no such pass %q (passes: %s)", name, strings.Join(PassNames(), ", "))
		}
		off[name] = true
	}
	p := &Program{Model: m, Fuse: opts.Fuse, StepForm: opts.StepForm, TensorForm: opts.TensorForm, RefBatch: opts.RefBatch, Groups: map[*ir.Func][]*Group{}}
	for _, ps := range passes {
		if !ps.required && (!opts.Fuse || off[dumpName(ps.name)]) {
			continue
		}
		if err := ps.fn(p); err != nil {
			return nil, err
		}
		if err := verify(p); err != nil {
			return nil, fmt.Errorf("internal error: IR invalid after pass %q: %w", ps.name, err)
		}
		if opts.DumpTo != nil && (opts.Dump == "all" || (opts.Dump != "" && strings.HasPrefix(dumpName(ps.name), opts.Dump))) {
			fmt.Fprintf(opts.DumpTo, "# after %s\n%s", ps.name, p.String())
		}
	}
	return p, nil
}

// String prints every function, and the kernel groups once fused.
func (p *Program) String() string {
	var b strings.Builder
	if p.Step == nil {
		b.WriteString(p.Model.Forward.Print())
		return b.String()
	}
	for _, f := range p.Funcs() {
		b.WriteString(f.Print())
		for i, g := range p.Groups[f] {
			fmt.Fprintf(&b, "  kernel %d %s\n", i, g)
		}
	}
	return b.String()
}
