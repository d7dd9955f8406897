package codegen

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/transformer"
)

// TestNVCC compiles generated kernels with nvcc for sm_80 and sm_90 with
// every warning an error. CI installs the toolkit; a machine without nvcc
// skips with one line.
func TestNVCC(t *testing.T) {
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		t.Skip("nvcc not on PATH: run the README's test command to install the CUDA toolkit")
	}
	for _, tc := range []struct {
		name string
		m    *ir.Model
	}{
		{"mlp_f32", irtest.MLP(ir.F32, 7, 9, 4, 0.2, irtest.Adam)},
		{"mlp_f64_sgd", irtest.MLP(ir.F64, 7, 9, 4, 0, ir.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-4})},
		// The grad-norm kernel and the clip scales (issue 29), both types.
		{"mlp_f32_clip_norm", irtest.MLP(ir.F32, 7, 9, 4, 0.2, ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipNorm: 1})},
		{"mlp_f64_clip_norm", irtest.MLP(ir.F64, 7, 9, 4, 0, ir.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9, ClipNorm: 1})},
		{"mlp_f32_clip_value", irtest.MLP(ir.F32, 7, 9, 4, 0, ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipValue: 0.5})},
		// Label-smoothed cross-entropy, thread-per-row and warp-per-row.
		{"ce_ls_4", labelSmoothed(4)},
		{"ce_ls_45", labelSmoothed(45)},
		// With an ignore index: the block's shared count of kept rows.
		{"ce_ls_ign_4", ceIgnoring(labelSmoothed(4), -100)},
		{"ce_ls_ign_45", ceIgnoring(labelSmoothed(45), -100)},
		// Mixed precision (issue 25): bf16 GEMM operands and activations,
		// the half preamble, f32 cross-entropy and optimizer.
		{"mlp_amp_bf16", amp(irtest.MLP(ir.F32, 7, 9, 4, 0.2, irtest.Adam), ir.BF16)},
		// f16 with dynamic loss scaling: the loss_scale seed of the loss's
		// gradient and the inv_scale unscale in the update kernel, and in
		// the grad-norm kernel when clipping by norm.
		{"mlp_amp_f16", scaled(amp(irtest.MLP(ir.F32, 7, 9, 4, 0.2, irtest.Adam), ir.F16))},
		// Convolutions under mixed precision: bf16 columns, pooling and
		// col2im reading bf16 through the vision templates' widened loads
		// (grouped, dilated and strided convolutions, average pooling),
		// and the seed ConvNet with batch norm in f16 with loss scaling.
		{"convnet_amp_bf16", amp(irtest.ConvNet(ir.F32, 5, irtest.Adam), ir.BF16)},
		{"convnet_bn_amp_f16", scaled(amp(irtest.SeedConvNet(1, 11, 9, 3, 5, 7, 4, true, irtest.Adam), ir.F16))},
		{"mlp_amp_f16_clip_norm", scaled(amp(irtest.MLP(ir.F32, 7, 9, 4, 0, ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipNorm: 1}), ir.F16))},
		// Attention under mixed precision: half q, k, v and output, the
		// f32 log-sum-exp's bits in half elements, attention dropout.
		{"gpt_amp_bf16", ampTransformer(t, "gpt", dsl.BF16)},
		{"transformer_amp_f16", ampTransformer(t, "transformer", dsl.F16)},
		// Heads of 16 and 64 (the gpt's): attention's tensor-core form
		// (nvcuda::wmma), in both types.
		{"gpt_amp_bf16_dh16", ampTransformerHeads(t, "gpt", dsl.BF16, 32, 2)},
		{"gpt_amp_f16_dh64", ampTransformerHeads(t, "gpt", dsl.F16, 128, 2)},
	} {
		var extra []string
		if strings.Contains(tc.name, "_dh") {
			// 255 registers in the tensor-core backward (sm_80): no
			// room to spare, so a spill fails the case.
			extra = []string{"-Xptxas=--warn-on-spills"}
		}
		t.Run(tc.name, func(t *testing.T) { nvccCase(t, nvcc, tc.name, tc.m, ops.StepAuto, extra...) })
	}
	// The recurrences' stepped form in f64 (the generated packages
	// compile it in f32), checkpointed: its shared tiles are twice the
	// size.
	t.Run("lstm_f64_stepped", func(t *testing.T) {
		nvccCase(t, nvcc, "lstm_f64_stepped", irtest.DeepLSTM(ir.F64, 4, 3, 5, 2, 3, 1), ops.StepAlways)
	})
}

// nvccCase compiles m's kernels, fused and with -fuse=none.
func nvccCase(t *testing.T, nvcc, name string, m *ir.Model, form ops.StepForm, extra ...string) {
	for _, fuse := range []bool{true, false} {
		p, err := compiler.Compile(m, compiler.Options{Fuse: fuse, StepForm: form})
		if err != nil {
			t.Fatal(err)
		}
		body, _, err := Kernels(p)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		cu := filepath.Join(dir, "k.cu")
		if err := os.WriteFile(cu, []byte(CUDA(p, body)), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := nvccDevice(nvcc, cu, dir, extra...); err != nil || len(out) > 0 {
			t.Errorf("%s fuse=%v: nvcc: %v\n%s", name, fuse, err, out)
		}
	}
}

// ampTransformer is the gpt or the TransformerLM at a small odd size
// (dropout 0.1) under mixed precision in h.
func ampTransformer(t *testing.T, name string, h dsl.DType) *ir.Model {
	return ampTransformerHeads(t, name, h, 12, 3)
}

// ampTransformerHeads is ampTransformer with width dModel in heads heads
// (h dsl.F32: no mixed precision).
func ampTransformerHeads(t *testing.T, name string, h dsl.DType, dModel, heads int) *ir.Model {
	small := func(c transformer.Config) transformer.Config {
		c.Vocab, c.DModel, c.Heads, c.FF, c.SeqLen, c.MaxLen, c.EncLayers, c.DecLayers = 11, dModel, heads, 20, 5, 8, 1, 1
		return c
	}
	m := transformer.NewGPT(small(transformer.GPTConfig()))
	if name == "transformer" {
		m = transformer.NewTransformerLM(small(transformer.LMConfig()))
	}
	if h != dsl.F32 {
		m.Precision(dsl.AMP{Type: h})
	}
	im, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	return im
}

// shortNVCC are the packages the nvcc tests compile with -short (the fast
// tier): one image model and one Transformer; the full suite compiles
// every package.
var shortNVCC = map[string]bool{"mlp": true, "gpt": true}

// TestNVCCGenerated compiles every committed generated/*/*.cu with nvcc for
// sm_80 and sm_90 in one call each, with ptxas reporting register spills
// as warnings and every warning an error (with -short, the packages of
// shortNVCC). The Transformer packages' update kernels spilled once on
// sm_80 and sm_90 (the run-time weight decay); no package may.
func TestNVCCGenerated(t *testing.T) {
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		t.Skip("nvcc not on PATH: run the README's test command to install the CUDA toolkit")
	}
	files, err := filepath.Glob(filepath.Join("..", "generated", "*", "*.cu"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated .cu files (%v)", err)
	}
	for _, cu := range files {
		if testing.Short() && !shortNVCC[filepath.Base(filepath.Dir(cu))] {
			continue
		}
		t.Run(filepath.Base(cu), func(t *testing.T) {
			t.Parallel()
			if out, err := nvccDevice(nvcc, cu, t.TempDir(), "-Xptxas=--warn-on-spills"); err != nil || len(out) > 0 {
				t.Errorf("nvcc %s: %v\n%s", cu, err, out)
			}
		})
	}
}

// nvccDevice compiles cu's device code for sm_80 and sm_90 in one call,
// with the flags generated packages are built with and every warning an
// error (extra adds to them), into a fatbin in outDir, and returns nvcc's
// output. Device code only, as the GPU backend loads it (codegen/nvcc
// builds a fatbin and PTX): compiling the host side too (-c) took about
// twice as long and checked nothing the backend uses.
func nvccDevice(nvcc, cu, outDir string, extra ...string) ([]byte, error) {
	args := append([]string{"-fatbin", "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
		"-o", filepath.Join(outDir, "k.fatbin")}, extra...)
	args = append(append(append(args, NVCCFlags...), NVCCWarnFlags...), cu)
	return exec.Command(nvcc, args...).CombinedOutput()
}

// labelSmoothed is a linear classifier of 7 features into classes with
// cross-entropy at label smoothing 0.1.
func labelSmoothed(classes int) *ir.Model {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(7))
	y := b.Input("y", ir.I32, ir.S("B"))
	logits := b.Linear("fc", x, classes)
	return b.Model("ce_ls", b.Op("cross_entropy", ir.Attrs{F: 0.1}, logits, y), logits, irtest.Adam)
}

// ceIgnoring gives m's cross-entropy loss ignore index ign.
func ceIgnoring(m *ir.Model, ign int) *ir.Model {
	m.Loss.Attrs.Ints = []int{ign}
	return m
}

// scaled gives m's policy GradScaler's dynamic loss scaling (dsl.AMP's
// default for f16).
func scaled(m *ir.Model) *ir.Model {
	m.Precision.Scaler = ir.GradScaler()
	return m
}

// amp puts m under the mixed-precision policy of type h (dsl.AMP).
func amp(m *ir.Model, h ir.DType) *ir.Model {
	m.Precision = &ir.Precision{Type: h, Pos: m.Pos}
	return m
}
