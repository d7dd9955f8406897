package compiler

import (
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/runtime"
)

// A training step is a transaction: when it fails (a label out of range,
// a non-finite loss or gradient) the parameters, the optimizer state and
// the running statistics stay exactly as they were. The device decides,
// without a round trip to the host, the way PyTorch's GradScaler skips a
// step with non-finite gradients:
//   - the guard kernel, after the backward pass, checks that the loss and
//     every gradient are finite and records the verdict and the loss in
//     the status block (runtime.StatusWords);
//   - every write that commits state (the optimizer kernels, and the
//     copies that commit batch norm's running statistics, which are never
//     written in place in a guarded step) first reads the status block and
//     does nothing when the step is bad.
// The host reads the status block once at the end of the step: the
// step's only device-to-host synchronisation.

// guardStep is the guard kernel's launch step; codegen renders the kernel
// (codegen/guard.go).
func (m *memPlanner) guardStep(f *ir.Func, status int, resolve func(*ir.Value) int, touch func(buf, step int), at int) runtime.Step {
	loss := resolve(f.Outputs["loss"])
	touch(loss, at)
	return runtime.Step{Kind: runtime.LaunchStep, Builtin: runtime.GuardKernel, Buf: status, Src: loss,
		Ops: "guard: loss and gradients finite", Bytes: runtime.Sum{m.plan.Buffers[m.grads].Elems}}
}

// commitStep turns the state copies of one phase into one guarded launch,
// whatever their number: a launch per state buffer would cost a device
// call each (ConvNet with batch norm has four running statistics).
func commitStep(copies []runtime.Step, bufs []runtime.Buffer) runtime.Step {
	st := runtime.Step{Kind: runtime.LaunchStep, Builtin: runtime.CommitKernel}
	names := make([]string, len(copies))
	for i, c := range copies {
		st.Commits = append(st.Commits, runtime.Commit{Dst: c.Buf, Src: c.Src})
		names[i] = strings.TrimPrefix(c.Ops, "copy ")
		z := bufs[c.Buf].Elems
		z.Mul *= 2 * int64(bufs[c.Buf].DType.Size()) // read and written
		st.Bytes = append(st.Bytes, z)
	}
	st.Ops = "commit " + strings.Join(names, ", ")
	return st
}

// gradNormStep is ClipGradNorm's launch step (codegen/guard.go renders
// it), first in the update phase, where the update check also sits: after
// gradient accumulation and the all-reduce, so the norm is the summed
// gradient's, as clip_grad_norm_ after loss.backward() on the whole batch
// sees it. It leaves the coefficient in the status block, which the
// update kernel reads (ops' clip_norm_scale), and fails the step when
// the norm is not finite. It runs only while the session clips
// (runtime.WhileClipping): with the max norm at +Inf the update scales
// by 1 without it.
//
// Its blocks each leave a partial sum in a persistent buffer (role
// "clip", which checkpoints leave out: it holds nothing between steps);
// the last block to finish adds them in block order.
func (m *memPlanner) gradNormStep(status int) runtime.Step {
	partials := m.persistent("clip", "clip.partials", ir.F64, ir.Static(runtime.GradNormMaxBlocks))
	return runtime.Step{Kind: runtime.LaunchStep, Builtin: runtime.GradNormKernel, Buf: status, Src: partials, When: runtime.WhileClipping,
		Ops: "grad norm: clip_grad_norm_ coefficient", Bytes: runtime.Sum{m.plan.Buffers[m.grads].Elems}}
}

// updateCheckStep is the update check's launch step (codegen/guard.go
// renders it), the first of the update phase: after gradient accumulation
// and the all-reduce, so it sees the gradient the update applies. Its
// bytes are an ordinary step's: the status block, since the host's bound
// (runtime/update_bound.go) lets it return at once; a step it must check
// element by element reads the parameters, the gradients and the
// optimizer's state too.
func (m *memPlanner) updateCheckStep(status int) runtime.Step {
	return runtime.Step{Kind: runtime.LaunchStep, Builtin: runtime.UpdateCheckKernel, Buf: status,
		Ops: "update check: new parameters and optimizer state finite", Bytes: runtime.Sum{{Mul: runtime.StatusWords * 4}}}
}

// clockStep is the clock kernel's launch step (codegen/clock.go renders
// it), the last of the update phase: after a good step it advances the
// device clock (runtime/clock.go: the step counters, the loss scaler,
// the update check's bound) and computes the next step's scalars, which
// the kernels read from the clock rather than take as arguments. The
// clock is a persistent buffer of role "clock", which checkpoints leave
// out: the host writes it from the state a checkpoint holds.
//
// Its FLOPs are an estimate of its one thread's dependent operations:
// about 40 a parameter group for each halving of the update check's
// binary search (31 for f32 parameters, 63 for f64) and a few hundred
// for the rest (the schedule's pow and cos).
func (m *memPlanner) clockStep(status int) runtime.Step {
	o := m.plan.Optimizer
	clock := m.persistent("clock", "clock", ir.F64, ir.Static(int(runtime.ClockWords(o))))
	rounds := int64(31)
	if m.plan.DType == runtime.F64 {
		rounds = 63
	}
	return runtime.Step{Kind: runtime.LaunchStep, Builtin: runtime.ClockKernel, Buf: status, Src: clock,
		Ops: "clock: the next step's scalars", Bytes: runtime.Sum{{Mul: runtime.StatusWords*4 + runtime.ClockWords(o)*8}},
		Flops: runtime.Sum{{Mul: 400 + rounds*40*int64(len(o.Rules()))}}}
}
