package codegen

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ngen-ml/ngen/runtime"
)

// GPUSpec is what the time model needs of a GPU.
type GPUSpec struct {
	Name string
	// BytesPerSec is the DRAM bandwidth; FP32, TF32 and FP64 the dense
	// peaks in FLOP/s (TF32: tensor cores, what cuBLAS reaches with
	// cuda.Options.TF32; FP64: the tensor-core peak cuBLAS's DGEMM uses).
	// Half is the dense FP16 and BF16 tensor-core peak with FP32
	// accumulation, what cublasGemmEx reaches with 16-bit operands and
	// CUBLAS_COMPUTE_32F (mixed precision's GEMMs).
	BytesPerSec, FP32, TF32, FP64, Half float64
	SMs                                 int
}

// GPUs are the published spec-sheet figures of the SXM parts:
//   - H100 SXM5 80 GB: NVIDIA H100 Tensor Core GPU datasheet (2023):
//     3.35 TB/s HBM3, FP32 67 TFLOPS, TF32 tensor 494.7 TFLOPS dense
//     (989 with sparsity), FP64 tensor 67 TFLOPS; 132 SMs (NVIDIA H100
//     Tensor Core GPU Architecture whitepaper, "H100 SXM5"); FP16 and
//     BF16 tensor 989.4 TFLOPS dense (1,979 with sparsity).
//   - A100 SXM4 80 GB: NVIDIA A100 Tensor Core GPU datasheet (2021):
//     2,039 GB/s HBM2e, FP32 19.5 TFLOPS, TF32 tensor 156 TFLOPS dense
//     (312 with sparsity), FP64 tensor 19.5 TFLOPS, FP16 and BF16 tensor
//     312 TFLOPS dense (624 with sparsity); 108 SMs (NVIDIA A100 Tensor
//     Core GPU Architecture whitepaper).
//   - H200 SXM 141 GB: NVIDIA H200 Tensor Core GPU datasheet (2024):
//     4.8 TB/s HBM3e; its compute is the H100 SXM5's (FP32 67 TFLOPS,
//     TF32 tensor 494.7 dense, FP64 tensor 67, FP16 and BF16 tensor
//     989.4 dense; 132 SMs, as PyTorch
//     reported on the lent machine).
var GPUs = map[string]GPUSpec{
	"h100": {Name: "H100 SXM5 80GB", BytesPerSec: 3.35e12, FP32: 67e12, TF32: 494.7e12, FP64: 67e12, Half: 989.4e12, SMs: 132},
	"h200": {Name: "H200 SXM 141GB", BytesPerSec: 4.8e12, FP32: 67e12, TF32: 494.7e12, FP64: 67e12, Half: 989.4e12, SMs: 132},
	"a100": {Name: "A100 SXM4 80GB", BytesPerSec: 2.039e12, FP32: 19.5e12, TF32: 156e12, FP64: 19.5e12, Half: 312e12, SMs: 108},
}

// The model's constants. Each is either a spec figure or calibrated on
// one measurement (docs/PERF.md, "On a real GPU" and "Modeled against
// measured"), never fitted per model; TestGPUModelVsMeasured holds the
// result within 1.5× of every recorded step (testdata/gpu_measured.tsv).
const (
	// The host's part of a step and each call's floor on the GPU. With
	// graphs (the backend's default) the host copies the inputs into
	// pinned staging, records the step's calls (no driver call each),
	// writes the kernel arguments that changed into the graph's nodes
	// (none since the device clock), launches the graph and reads the loss and the status back; the GPU
	// pays each node a floor whatever its work (its blocks' ramp-up and
	// drain, the gap to the next node). Both are calibrated on the seed
	// MLP's fused and unfused steps at batch 64 (session 13, H200): 0.279
	// and 0.376 ms for 20 and 40 calls whose modeled work is 0.049 and
	// 0.068 ms, so the floor is (0.376 − 0.279 − 0.019) ÷ 20 ≈ 4 µs a
	// call and the host 0.279 − 0.080 − 0.049 less the input copy
	// (0.020): 130 µs. Before session 13 each recorded call cost a round
	// trip to the device thread, and the same step took 0.81 ms.
	hostStepUs  = 130.0
	callFloorUs = 4.0
	// hostCopyBytesPerSec: an input's copy into pinned staging and its
	// DMA, one after the other (PCIe 5 x16 is 64 GB/s a direction; the
	// memcpy into staging is slower): an assumption.
	hostCopyBytesPerSec = 10e9
	// An eager call also costs the host its issue: the hand-off to the
	// device thread and the driver's cuLaunchKernel or cuBLAS's own
	// launch. The seed MLP's eager calls, timed by CUDA events, are 9–11
	// µs apart even when their work is nil (session 13), so 8 µs beside
	// the floor; a graph launch about 5 µs once a step (an assumption).
	eagerCallUs = 8.0
	graphLaunch = 5.0

	// A thread reaches memory at a rate set by what it keeps in flight
	// (Little's law: bytes in flight ÷ latency), so a grid of few threads
	// moves its bytes at threads × this rate, not at the DRAM's. Calibrated
	// on the gpt's LayerNorm backward (16 blocks of 128 threads moving
	// 6 MB in about 230 µs, 26 GB/s): about 8 bytes in flight per thread
	// over a ~0.6 µs DRAM latency. maxThreadsPerSM is the spec's (sm_80
	// and sm_90): the threads resident at once.
	threadBytesPerSec = 12.7e6
	maxThreadsPerSM   = 2048
	// Kernels that are not GEMMs run their arithmetic on CUDA cores in
	// dependent chains that wait on loads; a thread's rate calibrated on
	// the gpt's attention forward (135 MFLOP on 65536 threads in 84 µs).
	threadFlopsPerSec = 24.5e6

	// cuBLAS's FP32 SGEMM (no tensor cores) sustains about this share of
	// the FP32 peak on large products; an assumption, from the usual
	// 70–80% of SGEMM on recent NVIDIA parts. The model applies the same
	// share to the tensor-core peaks (TF32, 16-bit): an assumption no GPU
	// run has checked (docs/AMP.md).
	gemmEfficiency = 0.75
	gemmHalfK      = 128

	// A recurrence (rnn_scan) runs its T steps in turn on one block per
	// sequence; at every step each block streams the whole recurrent
	// matrix from L2 and synchronises. Per step: scanStepUs of latency
	// (barriers and the state's round trip; an assumption) plus the
	// matrix at scanBlockBytesPerSec per block, calibrated on the LSTM
	// LM's scans (1 MiB matrix; forward 3.94 ms and backward 2.87 ms per
	// layer over 64 steps, so 53 µs a step on average).
	scanStepUs           = 2.0
	scanBlockBytesPerSec = 20.5e9
	// The stepped form of a recurrence (compiler/ops/recur_stepped.go)
	// launches a time step at a time over tiles of 8 units and 32
	// sequences. A launch streams its tile's rows of the recurrent
	// matrix through shared memory (about steppedBlockBytesPerSec a
	// block: 128 threads with a few loads each in flight from L2) and
	// multiplies them from shared memory (about steppedSMFlopsPerSec an
	// SM: 8 FMAs per 6 shared loads, a third of the FP32 rate). Both are
	// assumptions: no GPU has run the stepped form yet.
	steppedBlockBytesPerSec = 10e9
	steppedSMFlopsPerSec    = 100e9

	// A kernel of one thread (the clock kernel, codegen/clock.go) runs a
	// chain of dependent FP64 operations: about 8 cycles each at 1.7 GHz
	// (an assumption, not measured).
	serialFlopsPerSec = 2e8
)

// cuBLAS's grid for one GEMM is its own choice; the model assumes
// 64×64 output tiles, one thread block each, and that cuBLAS splits K
// (in slices of at least splitKMin) to fill the SMs when the tiles do not.
const (
	gemmTile  = 64
	splitKMin = 256
)

// GPUOptions select what ModelGPU models.
type GPUOptions struct {
	Graphs bool // CUDA graphs (the GPU backend's default)
	TF32   bool // f32 GEMMs on TF32 tensor cores (cuda.Options.TF32)
	// Pipelined: the session reads each step's status a step late
	// (runtime.Session.SetPipelined), so the host's part of a step
	// overlaps the device's part of the one before, and a step in a
	// steady run costs the longer of the two, not their sum. Modeled
	// only: no GPU has run a pipelined step yet.
	Pipelined bool
}

// GPUSummary is the modeled step.
type GPUSummary struct {
	Device string `json:"device"`
	Graphs bool   `json:"graphs"`
	TF32   bool   `json:"tf32"`
	// Pipelined: the host's part overlaps the device's (GPUOptions).
	Pipelined bool `json:"pipelined"`
	// HalfGemms counts the GEMM rows with 16-bit operands (mixed
	// precision), priced at the FP16/BF16 tensor-core peak.
	HalfGemms int `json:"half_gemms"`
	// TensorLaunches counts the launches whose products run on tensor
	// cores (StepRow.TensorFlops: 16-bit attention's tensor-core form).
	TensorLaunches int     `json:"tensor_launches"`
	Ratio          float64 `json:"ratio"` // model ÷ ideal
	// OverheadUs is the host's and the launch overheads' share of the
	// modeled time; HostUs the host's part of it (hostStepUs and the
	// input copies).
	OverheadUs float64 `json:"overhead_us"`
	HostUs     float64 `json:"host_us"`
	// KernelUs is the rest: the calls' own modeled times.
	KernelUs float64 `json:"kernel_us"`
	// DeviceUs is the device's part: the calls with their floors and the
	// graph's launch. A step costs HostUs + DeviceUs, or the larger of
	// the two when Pipelined.
	DeviceUs float64 `json:"device_us"`
}

// ModelGPU models the step's time on gpu (a key of GPUs): the host's
// part of the step, then per device call
//   - a launch: max(bytes ÷ bandwidth, FLOPs ÷ rate), where the bandwidth
//     is the DRAM's or, for a grid of few threads, threads ×
//     threadBytesPerSec, and the rate threads × threadFlopsPerSec; the
//     products of a tensor-core form (TensorFlops) at the 16-bit tensor
//     cores' rate instead (tensorLaunchUs);
//   - a recurrence: T × (scanStepUs + the recurrent matrix ÷
//     scanBlockBytesPerSec) in the loop form; stepped, each of its
//     launches as a launch that also reads the recurrent matrix;
//   - a GEMM: max(bytes ÷ bandwidth, FLOPs ÷ (gemmEfficiency × peak)),
//     divided by the share of the SMs its tiles occupy, where the peak is
//     FP64's for f64 operands, the 16-bit tensor cores' (GPUSpec.Half)
//     for bf16 and f16 ones, and TF32's or FP32's for f32 ones;
//
// plus each call's floor (callFloorUs) and, eager, its host cost. The roofline
// ideal is the sum of max(bytes ÷ bandwidth, FLOPs ÷ peak) over the
// calls, with every SM busy and no overhead.
func (r *Report) ModelGPU(gpu string, o GPUOptions) error {
	spec, ok := GPUs[strings.ToLower(gpu)]
	if !ok {
		var have []string
		for k := range GPUs {
			have = append(have, k)
		}
		sort.Strings(have)
		return fmt.Errorf("no GPU %q in the model; have %s", gpu, strings.Join(have, ", "))
	}
	host := hostStepUs + float64(r.InputBytes)/hostCopyBytesPerSec*1e6
	model, overhead := host, host
	var ideal, kernels float64
	halfGemms, tensorLaunches := 0, 0
	for i := range r.Steps {
		s := &r.Steps[i]
		peak := spec.FP32
		var ga runtime.GemmArgs
		if s.Kind == "gemm" {
			ga = r.gemmCalls[i]
			switch {
			case ga.DType == runtime.F64:
				peak = spec.FP64
			case ga.DType == runtime.BF16 || ga.DType == runtime.F16:
				peak = spec.Half
				halfGemms++
			case o.TF32:
				peak = spec.TF32
			}
		}
		if s.TensorFlops > 0 {
			// The products on tensor cores, the rest at FP32's peak.
			ideal += max(float64(s.Bytes)/spec.BytesPerSec, float64(s.TensorFlops)/spec.Half+float64(s.Flops-s.TensorFlops)/peak) * 1e6
		} else {
			ideal += max(float64(s.Bytes)/spec.BytesPerSec, float64(s.Flops)/peak) * 1e6
		}
		var t float64
		switch {
		case s.Kind == "gemm":
			// A summed batch through the scratch writes and reads every
			// per-sample product once more: the model counts it, the
			// ideal does not.
			extra := 2 * runtime.LowerGemm(ga, 0, 0).Scratch * int64(ga.DType.Size())
			t = max(float64(s.Bytes+extra)/spec.BytesPerSec, float64(s.Flops)/(gemmEff(ga)*peak)) * 1e6
			t /= gemmFraction(ga, spec.SMs)
		case s.Stepped:
			t = float64(s.Calls) * steppedLaunchUs(s, spec)
		case s.TimeSteps > 0:
			perStep := scanStepUs + float64(s.RecurBytes)/scanBlockBytesPerSec*1e6
			t = float64(s.TimeSteps) * perStep
		case s.Kind == "launch" && s.TensorFlops > 0:
			t = tensorLaunchUs(s, spec)
			tensorLaunches++
		case s.Kind == "launch":
			t = launchUs(s, spec)
		default: // memsets and device copies: the copy engines or a full grid
			t = float64(s.Bytes) / spec.BytesPerSec * 1e6
		}
		over := (callFloorUs + eagerCallUs) * float64(s.Calls)
		if o.Graphs {
			over = callFloorUs * float64(s.Calls)
		}
		s.GPUUs = t + over
		kernels += t
		model += s.GPUUs
		overhead += over
	}
	if o.Graphs {
		model += graphLaunch
		overhead += graphLaunch
	}
	devUs := model - host
	if o.Pipelined {
		// The host's part and the device's (the rest) overlap.
		model = max(host, devUs)
	}
	r.GPUModelUs, r.GPUIdealUs = model, ideal
	r.GPU = &GPUSummary{Device: spec.Name, Graphs: o.Graphs, TF32: o.TF32, Pipelined: o.Pipelined, HalfGemms: halfGemms, TensorLaunches: tensorLaunches, Ratio: model / ideal, OverheadUs: overhead, HostUs: host, DeviceUs: devUs, KernelUs: kernels}
	return nil
}

// launchUs is a kernel's time: its bytes at the bandwidth its resident
// threads can draw, its FLOPs at the rate they can issue.
func launchUs(s *StepRow, spec GPUSpec) float64 {
	if s.Threads == 1 {
		// One thread (the clock kernel): its FLOPs are its dependent
		// operations, at serialFlopsPerSec; its few words stay in L2.
		return float64(s.Flops) / serialFlopsPerSec * 1e6
	}
	threads := s.Threads
	if threads <= 0 {
		threads = s.Blocks * 256
	}
	resident := float64(min(threads, spec.SMs*maxThreadsPerSM))
	bw := min(spec.BytesPerSec, resident*threadBytesPerSec)
	rate := min(spec.FP32, resident*threadFlopsPerSec)
	return max(float64(s.Bytes)/bw, float64(s.Flops)/rate) * 1e6
}

// tensorLaunchUs is a kernel whose products run on tensor cores
// (StepRow.TensorFlops: attention's tensor-core form): launchUs's bytes
// and CUDA-core FLOPs (those that are not products), beside the products
// at the 16-bit tensor cores' rate at gemmEfficiency on the SMs its
// blocks occupy. The shared-memory round trips between the products are
// not priced: an assumption no GPU run has checked.
func tensorLaunchUs(s *StepRow, spec GPUSpec) float64 {
	core := *s
	core.Flops = s.Flops - s.TensorFlops
	rate := spec.Half * gemmEfficiency * smFraction(s.Blocks, spec.SMs)
	return max(launchUs(&core, spec), float64(s.TensorFlops)/rate*1e6)
}

// steppedLaunchUs is one launch of a stepped recurrence (s.Calls of them):
// its share of the row's bytes plus the recurrent matrix its tiles read
// (s.RecurBytes), at its blocks' streaming rate, and its share of the
// FLOPs at the rate of the SMs its blocks occupy.
func steppedLaunchUs(s *StepRow, spec GPUSpec) float64 {
	n := int64(max(s.Calls, 1))
	bytes := float64(s.Bytes/n + s.RecurBytes)
	bw := min(spec.BytesPerSec, float64(s.Blocks)*steppedBlockBytesPerSec)
	rate := min(spec.FP32, float64(min(s.Blocks, spec.SMs))*steppedSMFlopsPerSec)
	return max(bytes/bw, float64(s.Flops/n)/rate) * 1e6
}

// smFraction is the share of the SMs a grid of blocks keeps busy.
func smFraction(blocks, sms int) float64 {
	if blocks <= 0 {
		return 1 // memsets and copies: the copy engines or a full grid
	}
	return min(1, float64(blocks)/float64(sms))
}

// gemmFraction is smFraction of a GEMM's calls under the tile assumption
// above: the largest call decides.
func gemmFraction(g runtime.GemmArgs, sms int) float64 {
	frac := 0.0
	for _, c := range runtime.LowerGemm(g, 0, 0).Calls {
		tiles := ceilDiv(c.M, gemmTile) * ceilDiv(c.N, gemmTile) * max(c.Batch, 1)
		split := 1
		if tiles < sms {
			split = max(1, min(ceilDiv(sms, tiles), c.K/splitKMin))
		}
		frac = max(frac, smFraction(tiles*split, sms))
	}
	if frac == 0 {
		return 1
	}
	return frac
}

// gemmEff is the share of the peak a GEMM's calls sustain: gemmEfficiency,
// scaled by K ÷ (K + gemmHalfK) for the shortest K among them, since a
// tile's fixed work (filling the pipeline, writing C) is amortised over K.
func gemmEff(g runtime.GemmArgs) float64 {
	k := 0
	for _, c := range runtime.LowerGemm(g, 0, 0).Calls {
		if k == 0 || c.K < k {
			k = c.K
		}
	}
	return gemmEfficiency * float64(k) / float64(k+gemmHalfK)
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// SMStarved lists the launches that move at least minBytes each (a stepped
// row's launches, each its share) yet whose grid occupies fewer than half
// of gpu's SMs.
func (r *Report) SMStarved(gpu string, minBytes int64) []StepRow {
	spec := GPUs[gpu]
	var out []StepRow
	for _, s := range r.Steps {
		if s.Kind == "launch" && s.Bytes/int64(max(s.Calls, 1)) >= minBytes && 2*s.Blocks < spec.SMs {
			out = append(out, s)
		}
	}
	return out
}

// writeGPU prints the modeled GPU time: the rows' times and the summary.
func (r *Report) writeGPU(w io.Writer) error {
	g := r.GPU
	mode := "eager calls"
	if g.Graphs {
		mode = "one CUDA graph per step"
	}
	prec := "FP32"
	if g.TF32 {
		prec = "TF32"
	}
	if g.HalfGemms > 0 {
		prec = fmt.Sprintf("%d 16-bit GEMMs on FP16/BF16 tensor cores, the rest %s", g.HalfGemms, prec)
	} else {
		prec += " GEMMs"
	}
	if g.TensorLaunches > 0 {
		prec += fmt.Sprintf("; %d launches with their products on tensor cores (16-bit attention)", g.TensorLaunches)
	}
	if g.Pipelined {
		mode += ", the host's part overlapping the step before (pipelined)"
	}
	fmt.Fprintf(w, "\nmodeled on %s (%s, %s)\n\n", g.Device, mode, prec)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tkind\tkernel\tcalls\tblocks\tmodel µs")
	for i, s := range r.Steps {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%.2f\n", i, s.Kind, s.Kernel, s.Calls, s.Blocks, s.GPUUs)
	}
	tw.Flush()
	parts := fmt.Sprintf("host %.1f µs, launch overhead %.1f µs", g.HostUs, g.OverheadUs-g.HostUs)
	if g.Pipelined {
		parts = fmt.Sprintf("the longer of the host's part, %.1f µs, and the device's, %.1f µs, with %.1f µs of launch overhead", g.HostUs, g.DeviceUs, g.OverheadUs-g.HostUs)
	}
	_, err := fmt.Fprintf(w, "\nmodeled step: %.1f µs (%s)\nroofline ideal: %.1f µs\nratio: %.2f\n",
		r.GPUModelUs, parts, r.GPUIdealUs, g.Ratio)
	return err
}
