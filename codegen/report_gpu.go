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
	BytesPerSec, FP32, TF32, FP64 float64
	SMs                           int
}

// GPUs are the published spec-sheet figures of the SXM parts:
//   - H100 SXM5 80 GB: NVIDIA H100 Tensor Core GPU datasheet (2023):
//     3.35 TB/s HBM3, FP32 67 TFLOPS, TF32 tensor 494.7 TFLOPS dense
//     (989 with sparsity), FP64 tensor 67 TFLOPS; 132 SMs (NVIDIA H100
//     Tensor Core GPU Architecture whitepaper, "H100 SXM5").
//   - A100 SXM4 80 GB: NVIDIA A100 Tensor Core GPU datasheet (2021):
//     2,039 GB/s HBM2e, FP32 19.5 TFLOPS, TF32 tensor 156 TFLOPS dense
//     (312 with sparsity), FP64 tensor 19.5 TFLOPS; 108 SMs (NVIDIA A100
//     Tensor Core GPU Architecture whitepaper).
var GPUs = map[string]GPUSpec{
	"h100": {Name: "H100 SXM5 80GB", BytesPerSec: 3.35e12, FP32: 67e12, TF32: 494.7e12, FP64: 67e12, SMs: 132},
	"a100": {Name: "A100 SXM4 80GB", BytesPerSec: 2.039e12, FP32: 19.5e12, TF32: 156e12, FP64: 19.5e12, SMs: 108},
}

// Launch overheads of the model, in microseconds. They are assumptions,
// not measurements: an eager call costs the host about 4 µs (the driver's
// cuLaunchKernel or cuBLAS's own launch, about 2–3 µs, plus the hand-off
// to the device thread), and when the host keeps ahead of the GPU about
// 1 µs passes between dependent kernels on the GPU; a graph launch costs
// the host one call (about 5 µs, once per step) and its nodes start about
// 1 µs apart.
const (
	eagerCallUs = 4.0
	graphNodeUs = 1.0
	graphLaunch = 5.0
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
}

// GPUSummary is the modeled step.
type GPUSummary struct {
	Device string  `json:"device"`
	Graphs bool    `json:"graphs"`
	TF32   bool    `json:"tf32"`
	Ratio  float64 `json:"ratio"` // model ÷ ideal
	// OverheadUs is the launch overheads' share of the modeled time.
	OverheadUs float64 `json:"overhead_us"`
}

// ModelGPU models the step's time on gpu (a key of GPUs). Per device call,
// max(bytes ÷ bandwidth, FLOPs ÷ peak) divided by the fraction of the SMs
// its grid occupies (blocks ÷ SMs, at most 1), plus the launch overhead of
// an eager call, or of a graph node when graphs are on. The roofline ideal
// is the sum of max(bytes ÷ bandwidth, FLOPs ÷ peak) over the steps, with
// every SM busy and no overhead.
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
	var model, ideal, overhead float64
	for i := range r.Steps {
		s := &r.Steps[i]
		peak := spec.FP32
		var ga runtime.GemmArgs
		if s.Kind == "gemm" {
			ga = r.gemmCalls[i]
			switch {
			case ga.DType == runtime.F64:
				peak = spec.FP64
			case o.TF32:
				peak = spec.TF32
			}
		}
		t := max(float64(s.Bytes)/spec.BytesPerSec, float64(s.Flops)/peak) * 1e6
		ideal += t
		if s.Kind == "gemm" {
			// A summed batch through the scratch writes and reads every
			// per-sample product once more: the model counts it, the
			// ideal does not.
			extra := 2 * runtime.LowerGemm(ga, 0, 0).Scratch * int64(ga.DType.Size())
			t = max(float64(s.Bytes+extra)/spec.BytesPerSec, float64(s.Flops)/peak) * 1e6
		}
		frac := 1.0
		switch s.Kind {
		case "launch":
			frac = smFraction(s.Blocks, spec.SMs)
		case "gemm":
			frac = gemmFraction(ga, spec.SMs)
		}
		over := eagerCallUs * float64(s.Calls)
		if o.Graphs {
			over = graphNodeUs * float64(s.Calls)
		}
		s.GPUUs = t/frac + over
		model += s.GPUUs
		overhead += over
	}
	if o.Graphs {
		model += graphLaunch
		overhead += graphLaunch
	}
	r.GPUModelUs, r.GPUIdealUs = model, ideal
	r.GPU = &GPUSummary{Device: spec.Name, Graphs: o.Graphs, TF32: o.TF32, Ratio: model / ideal, OverheadUs: overhead}
	return nil
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

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// SMStarved lists the launches that move at least minBytes yet whose grid
// occupies fewer than half of gpu's SMs.
func (r *Report) SMStarved(gpu string, minBytes int64) []StepRow {
	spec := GPUs[gpu]
	var out []StepRow
	for _, s := range r.Steps {
		if s.Kind == "launch" && s.Bytes >= minBytes && 2*s.Blocks < spec.SMs {
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
	fmt.Fprintf(w, "\nmodeled on %s (%s, %s GEMMs)\n\n", g.Device, mode, prec)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tkind\tkernel\tcalls\tblocks\tmodel µs")
	for i, s := range r.Steps {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%.2f\n", i, s.Kind, s.Kernel, s.Calls, s.Blocks, s.GPUUs)
	}
	tw.Flush()
	_, err := fmt.Fprintf(w, "\nmodeled step: %.1f µs (launch overhead %.1f µs)\nroofline ideal: %.1f µs\nratio: %.2f\n",
		r.GPUModelUs, g.OverheadUs, r.GPUIdealUs, g.Ratio)
	return err
}
