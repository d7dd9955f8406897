package codegen

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/dsl"
)

// TestModelGPUTensorAttention: a 16-bit attention with heads of 16 (the
// tensor-core form, compiler/ops/attention_mma.go) reports the products
// as tensor-core FLOPs, a share of its FLOPs (the rest is the softmax
// between them), and ModelGPU prices that row by tensorLaunchUs, below
// what the same row costs with every FLOP on CUDA cores; an f32 model's
// and a head size of 4's attention rows have none.
func TestModelGPUTensorAttention(t *testing.T) {
	for _, c := range []struct {
		name   string
		h      dsl.DType
		dModel int
		heads  int
		tensor bool
	}{
		{"bf16 heads of 16", dsl.BF16, 32, 2, true},
		{"f16 heads of 16", dsl.F16, 32, 2, true},
		{"bf16 heads of 4", dsl.BF16, 12, 3, false},
		{"f32 heads of 16", dsl.F32, 32, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := ampTransformerHeads(t, "gpt", c.h, c.dModel, c.heads)
			p, err := compiler.Compile(m, compiler.Options{Fuse: true})
			if err != nil {
				t.Fatal(err)
			}
			r := h100Report(t, p)
			spec := GPUs["h100"]
			rows := 0
			for _, s := range r.Steps {
				if !strings.HasPrefix(s.Ops, "attention") {
					if s.TensorFlops != 0 {
						t.Errorf("%s (%s): %d tensor-core FLOPs", s.Label, s.Ops, s.TensorFlops)
					}
					continue
				}
				rows++
				if !c.tensor {
					if s.TensorFlops != 0 {
						t.Errorf("%s: %d tensor-core FLOPs without the form", s.Label, s.TensorFlops)
					}
					continue
				}
				if s.TensorFlops <= 0 || s.TensorFlops >= s.Flops {
					t.Errorf("%s: %d tensor-core FLOPs of %d", s.Label, s.TensorFlops, s.Flops)
					continue
				}
				if got, want := s.GPUUs-callFloorUs, tensorLaunchUs(&s, spec); math.Abs(got-want) > 1e-9*want {
					t.Errorf("%s: priced %.3f µs, tensorLaunchUs %.3f", s.Label, got, want)
				}
				if cuda := launchUs(&s, spec); tensorLaunchUs(&s, spec) > cuda {
					t.Errorf("%s: %.3f µs on tensor cores, more than %.3f on CUDA cores", s.Label, tensorLaunchUs(&s, spec), cuda)
				}
			}
			if rows != 2 {
				t.Errorf("%d attention rows, want forward and backward", rows)
			}
			if want := map[bool]int{true: 2, false: 0}[c.tensor]; r.GPU.TensorLaunches != want {
				t.Errorf("TensorLaunches %d, want %d", r.GPU.TensorLaunches, want)
			}
			var buf bytes.Buffer
			if err := r.writeGPU(&buf); err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(buf.String(), "launches with their products on tensor cores"); got != c.tensor {
				t.Errorf("the summary's line does not say so:\n%s", buf.String()[:200])
			}
		})
	}
}

// h100Report is p's report with its step modeled on an H100, one CUDA
// graph per step.
func h100Report(t *testing.T, p *compiler.Program) *Report {
	t.Helper()
	r, err := MakeReport(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ModelGPU("h100", GPUOptions{Graphs: true}); err != nil {
		t.Fatal(err)
	}
	return r
}
