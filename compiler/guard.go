package compiler

import (
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

// commitStep turns a state copy into its guarded form.
func commitStep(st runtime.Step) runtime.Step {
	st.Kind, st.Builtin = runtime.LaunchStep, runtime.CommitKernel
	return st
}
