package compiler

import (
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// Program is a model on its way through the passes: the declared model, the
// functions derived from it, and (after fusion and memory planning) the
// kernels and the runtime plan.
type Program struct {
	Model   *ir.Model
	Step    *ir.Func // forward + backward + optimizer update
	Predict *ir.Func // forward to the model's output
	// PredictEval is Predict specialised to eval mode, when the forward
	// reads the train flag (batch norm, dropout); nil otherwise.
	PredictEval *ir.Func
	Fuse        bool
	// StepForm chooses the GPU form of loops that have a stepped one
	// (Options.StepForm).
	StepForm ops.StepForm
	// TensorForm chooses whether ops with a tensor-core GPU form take it
	// (Options.TensorForm).
	TensorForm ops.TensorForm
	// Groups holds each function's kernels in execution order (set by the
	// fuse pass).
	Groups map[*ir.Func][]*Group
	// Plan is the runtime plan without kernel sources (set by plan memory).
	Plan *runtime.Plan
	// BufOf maps each value kernels touch to its plan buffer.
	BufOf map[*ir.Value]int
	// PeakBytes is the planned device memory at the reference batch size.
	PeakBytes int64
	RefBatch  int
	// ActivationBytes is the part of PeakBytes the forward and backward
	// passes' temporaries take (the step's arena before the update).
	ActivationBytes int64
	// Without is the same model compiled without checkpoints, when it
	// has any: the report's comparison.
	Without *Program
	// F32 is the same model compiled without mixed precision, when it
	// has a policy: the report's comparison of planned memory.
	F32 *Program
}

// Funcs lists the program's functions in plan order.
func (p *Program) Funcs() []*ir.Func {
	var out []*ir.Func
	for _, f := range []*ir.Func{p.Step, p.Predict, p.PredictEval} {
		if f != nil {
			out = append(out, f)
		}
	}
	return out
}
