package codegen

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// Report describes one training step of a compiled program.
type Report struct {
	Model   string `json:"model"`
	Fused   bool   `json:"fused"`
	Batch   int    `json:"batch"`
	Kernels int    `json:"kernels"`
	// DistinctKernels counts the kernels the step's launches share (one
	// compiled kernel per distinct computation: Kernels counts launches).
	DistinctKernels int `json:"distinct_kernels"`
	// ModuleKernels counts every kernel of the module (all functions).
	ModuleKernels int `json:"module_kernels"`
	Gemms         int `json:"gemms"`
	// DeviceCalls counts the calls the GPU backend issues for one step:
	// launches, cuBLAS calls (runtime.LowerGemm) and memsets and copies.
	DeviceCalls int   `json:"device_calls"`
	Bytes       int64 `json:"bytes"`
	Flops       int64 `json:"flops"`
	PeakBytes   int64 `json:"peak_bytes"`
	// ActivationBytes is the forward and backward temporaries' share of
	// PeakBytes.
	ActivationBytes int64 `json:"activation_bytes"`
	// Without is the same step without checkpoints, when the model has
	// any (recomputed activations trade FLOPs for memory).
	Without *Report   `json:"without_checkpointing,omitempty"`
	Steps   []StepRow `json:"steps"`
	// GPU is the modeled GPU time (ModelGPU, report_gpu.go), when asked.
	GPU        *GPUSummary `json:"gpu,omitempty"`
	GPUModelUs float64     `json:"gpu_model_us,omitempty"`
	GPUIdealUs float64     `json:"gpu_ideal_us,omitempty"`
	// InputBytes are the step's inputs, copied from the host every step.
	InputBytes int64 `json:"input_bytes"`
	// Buffers are the plan's buffers with their dtypes (report_buffers.go).
	Buffers []BufferRow `json:"buffers"`
	// Precision is the mixed-precision policy, when the model has one,
	// and F32PeakBytes the planned peak of the same model in f32.
	Precision    string `json:"precision,omitempty"`
	F32PeakBytes int64  `json:"f32_peak_bytes,omitempty"`
	gemmCalls    []runtime.GemmArgs
}

// StepRow is one launch, GEMM, memset or copy of the step.
type StepRow struct {
	Kind string `json:"kind"`
	// Label names the launch or GEMM (its layer and ops); Kernel is the
	// kernel a launch runs, shared by launches that compute alike.
	Label  string `json:"label,omitempty"`
	Kernel string `json:"kernel,omitempty"`
	Ops    string `json:"ops"`
	Bytes  int64  `json:"bytes"`
	Flops  int64  `json:"flops"`
	// TensorFlops is the part of Flops the GPU form runs on tensor cores
	// (runtime.Step.TensorFlops).
	TensorFlops int64 `json:"tensor_flops,omitempty"`
	// TimeSteps is a recurrence's loop count; 0 for other steps.
	TimeSteps int `json:"time_steps,omitempty"`
	// Stepped: the recurrence's GPU form runs a time step a launch
	// (Calls launches; runtime.KernelInfo.Steps); otherwise one launch
	// runs the loop over time inside.
	Stepped bool `json:"stepped,omitempty"`
	// RecurBytes is what a recurrence reads of its recurrent weight
	// matrix at each time step: all of it in every block (the loop form
	// runs a block per sequence), or once per tile of ops.StepTile
	// sequences (stepped); 0 for other steps.
	RecurBytes int64 `json:"recur_bytes,omitempty"`
	// Calls is the device calls the GPU backend issues for the row;
	// Blocks a launch's GPU grid (the CPU may launch it otherwise).
	Calls   int `json:"calls"`
	Blocks  int `json:"blocks,omitempty"`
	Threads int `json:"threads,omitempty"` // blocks × threads per block
	// GPUUs is the row's modeled time (ModelGPU).
	GPUUs float64 `json:"gpu_us,omitempty"`
}

// MakeReport evaluates the step function's plan at the program's
// reference batch size, as a new session runs it (Plan.RunsAtStart): a
// model compiled with clipping off (dsl.ClipGradNorm(math.Inf(1))) does
// not launch its grad-norm kernel until Session.SetClipNorm.
func MakeReport(p *compiler.Program) (*Report, error) {
	_, plan, err := Kernels(p)
	if err != nil {
		return nil, err
	}
	env := map[string]int{"B": p.RefBatch}
	r := &Report{Model: p.Model.Name, Fused: p.Fuse, Batch: p.RefBatch, PeakBytes: p.PeakBytes, ActivationBytes: p.ActivationBytes}
	if p.Without != nil {
		w, err := MakeReport(p.Without)
		if err != nil {
			return nil, err
		}
		w.Steps, w.Buffers = nil, nil
		r.Without = w
	}
	loops := map[int]int{}   // plan step → time steps of a recurrence
	recur := map[int]int64{} // plan step → its recurrent weight's bytes
	for _, g := range p.Groups[p.Step] {
		if T, product, ok := ops.ScanWork(g.Root); g.Kind == compiler.Loop && ok {
			loops[g.Step] = T
			// product is 2·rows·cols FLOPs of the recurrent matrix.
			recur[g.Step] = product / 2 * int64(g.Root.DType.Size())
		}
	}
	r.ModuleKernels = len(plan.Kernels)
	distinct := map[int]bool{}
	for _, f := range plan.Funcs {
		if f.Name != "step" {
			continue
		}
		for _, in := range f.Inputs {
			b := plan.Buffers[in.Buf]
			r.InputBytes += b.Elems.Eval(env) * int64(b.DType.Size())
		}
		for i, st := range f.Steps {
			if !plan.RunsAtStart(st.When) {
				continue // the grad-norm kernel while clipping is off
			}
			row := StepRow{Label: runtime.StepLabel(plan, &st), Ops: st.Ops, Bytes: st.Bytes.Eval(env), Flops: st.Flops.Eval(env), TensorFlops: st.TensorFlops.Eval(env), Calls: 1, TimeSteps: loops[i], RecurBytes: recur[i]}
			var ga runtime.GemmArgs
			switch st.Kind {
			case runtime.LaunchStep:
				row.Kind, row.Kernel = "launch", plan.Kernels[st.Kernel].Name
				if n := plan.Kernels[st.Kernel].Steps; n > 0 {
					// Each launch's tiles of sequences read the
					// recurrent matrix once each.
					row.Calls, row.Stepped = n, true
					row.RecurBytes *= int64((p.RefBatch + ops.StepTile - 1) / ops.StepTile)
				}
				row.Blocks = st.Grid[0].Eval(env) * st.Grid[1].Eval(env) * st.Grid[2].Eval(env)
				row.Threads = row.Blocks * st.Block[0] * max(st.Block[1], 1) * max(st.Block[2], 1)
				r.Kernels++
				distinct[st.Kernel] = true
			case runtime.GemmStep:
				row.Kind = "gemm"
				ga = st.Gemm.ArgsFor(env, plan.Buffers, nil)
				row.Calls = len(runtime.LowerGemm(ga, 0, 0).Calls)
				r.Gemms++
			case runtime.MemsetStep:
				row.Kind = "memset"
			case runtime.CopyStep:
				row.Kind = "copy"
				b := plan.Buffers[st.Buf]
				row.Bytes = 2 * b.Elems.Eval(env) * int64(b.DType.Size())
			}
			r.Bytes += row.Bytes
			r.Flops += row.Flops
			r.DeviceCalls += row.Calls
			r.Steps = append(r.Steps, row)
			r.gemmCalls = append(r.gemmCalls, ga)
		}
	}
	r.DistinctKernels = len(distinct)
	r.precisionReport(p, plan)
	return r, nil
}

// WriteText prints the report as a table and a summary.
func (r *Report) WriteText(w io.Writer) error {
	mode := "fused"
	if !r.Fused {
		mode = "unfused"
	}
	fmt.Fprintf(w, "model %s, %s, one training step at batch %d\n\n", r.Model, mode, r.Batch)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tkind\tlabel\tkernel\tbytes\tflops\tops")
	for i, s := range r.Steps {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%d\t%s\n", i, s.Kind, s.Label, s.Kernel, s.Bytes, s.Flops, s.Ops)
	}
	tw.Flush()
	if err := r.writeLoops(w); err != nil {
		return err
	}
	if err := r.writeBuffers(w); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nkernels per step: %d launches of %d distinct kernels (%d in the module)\nGEMMs per step: %d\ndevice calls per step (kernels, cuBLAS calls, memsets, copies): %d\nglobal memory bytes: %d\nFLOPs: %d\nplanned peak memory: %d bytes (forward and backward temporaries: %d)\n",
		r.Kernels, r.DistinctKernels, r.ModuleKernels, r.Gemms, r.DeviceCalls, r.Bytes, r.Flops, r.PeakBytes, r.ActivationBytes)
	if err == nil && r.Without != nil {
		o := r.Without
		_, err = fmt.Fprintf(w, "without checkpointing: planned peak memory %d bytes (temporaries %d), FLOPs %d (checkpointing adds %.1f%%)\n",
			o.PeakBytes, o.ActivationBytes, o.Flops, 100*float64(r.Flops-o.Flops)/float64(o.Flops))
	}
	if err == nil && r.GPU != nil {
		err = r.writeGPU(w)
	}
	return err
}

// writeLoops prints each recurrence per time step: a time step costs one
// T-th of its bytes and FLOPs. Its kernel runs the loop over time inside,
// or (stepped) is launched once a time step on the GPU; either way the
// kernel count does not grow with T.
func (r *Report) writeLoops(w io.Writer) error {
	var n int
	var bytes, flops int64
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, s := range r.Steps {
		if s.TimeSteps == 0 {
			continue
		}
		if n == 0 {
			fmt.Fprintln(w, "\nrecurrences, per time step (one kernel each; GPU form: the loop over time inside, or stepped, a launch a time step):")
			fmt.Fprintln(tw, "#\tkernel\ttime steps\tGPU form\tbytes per time step\tflops per time step")
		}
		n++
		bytes += s.Bytes / int64(s.TimeSteps)
		flops += s.Flops / int64(s.TimeSteps)
		form := "loop"
		if s.Stepped {
			form = fmt.Sprintf("stepped, %d launches", s.Calls)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%d\t%d\n", i, s.Label, s.TimeSteps, form, s.Bytes/int64(s.TimeSteps), s.Flops/int64(s.TimeSteps))
	}
	if n == 0 {
		return nil
	}
	tw.Flush()
	_, err := fmt.Fprintf(w, "per time step, all recurrences: %d kernels' steps, %d bytes, %d FLOPs\n", n, bytes, flops)
	return err
}

// WriteJSON prints the report as one JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
