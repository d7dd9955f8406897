package lstm_test

import (
	"testing"

	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/lstm"
	"github.com/ngen-ml/ngen/models/seqoracle"
)

// TestAMPLSTMOracle trains the generator (from non-zero h0, c0) and the
// language model at the oracle's odd sizes under dsl.AMP{Type:
// dsl.BF16}, fused, -fuse=none and in the recurrences' baseline forms,
// against PyTorch 1.13 training the same modules under
// torch.autocast(device_type="cpu", dtype=torch.bfloat16), and against
// ngen's f32 run; and under f16 with GradScaler's defaults against f32.
// 3 steps of SGD with momentum (Adam's first steps are lr times a
// gradient's sign, which a 16-bit rounding flips for gradients near 0).
//
// The policy is autocast's on the CPU: nn.LSTM is on neither of its
// lists, so the recurrence and its input GEMM run in f32 from the f32
// embedding; only the Linear is a bf16 GEMM. Its output differs from
// PyTorch's addmm by one more rounding (ngen rounds the product, then
// the bias add; addmm rounds once): 2^-8 of a logit, so the logits
// within 1% of their largest, the losses (f32 cross-entropy of those
// logits) within 1%, the gradients (every one downstream of the bf16
// logits' gradient, the Linear's a bf16 GEMM) within 3% of each
// tensor's largest (a few 2^-8 roundings; measured 1.5% against PyTorch
// on an AVX512-BF16 machine, native and widened bf16 GEMMs alike, 0.6%
// against f32: the margin is for PyTorch's CPU bf16 paths, which differ
// between machines), the updates within 2% of their norm (measured
// 0.6%). Against f32: the same roundings, no more (the recurrence is f32
// in both), so the same bounds; f16's roundings are 8 times finer.
func TestAMPLSTMOracle(t *testing.T) {
	x, next, h0, c0, sizes := oracleData(9)
	s := lstm.Sizes{Vocab: orV, Emb: 11, Hidden: orH, Layers: orL, T: orT, DType: dsl.F32, Optimizer: dsl.SGD{LR: 0.5, Momentum: 0.9}}
	tol := seqoracle.AMPTol{Loss: 0.01, Values: 0.03, Update: 0.02}
	for _, c := range []struct {
		kind   string
		build  func(name string, s lstm.Sizes) *dsl.Model
		inputs map[string]any
	}{
		{"lstm", lstm.Generator, map[string]any{"x": x, "y": next[:orB], "h0": h0, "c0": c0}},
		{"charlm", lstm.LanguageModel, map[string]any{"x": x, "y": next}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			seqoracle.CheckAMP(t, seqoracle.AMPCase{
				Case: seqoracle.Case{Kind: c.kind, Rows: orB, Steps: 3, Sizes: sizes, Inputs: c.inputs},
				Build: func(p *dsl.AMP) *dsl.Model {
					m := c.build(c.kind+"_amp", s)
					if p != nil {
						m.Precision(*p)
					}
					return m
				},
				Tol: tol, F32Tol: tol,
			})
		})
	}
}
