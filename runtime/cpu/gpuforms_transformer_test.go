package cpu_test

import (
	"github.com/ngen-ml/ngen/generated/gpt"
	"github.com/ngen-ml/ngen/generated/gpt_unfused"
	"github.com/ngen-ml/ngen/generated/transformer"
	"github.com/ngen-ml/ngen/generated/transformer_unfused"
	decl "github.com/ngen-ml/ngen/models/transformer"
	"github.com/ngen-ml/ngen/runtime"
)

// The Transformer models' rows of genPackages: token batches of their
// own, as the sequence rows (gpuforms_seq_test.go). Batch 2 keeps the GPU
// forms' fibers (the flash-attention kernels synchronise) quick; the
// attention, LayerNorm and softmax kernels run with their GPU blocks.
// knownGPUFormsGaps are rows whose comparison fails today, with why. The
// fused TransformerLM's shared embedding gradient differs between the GPU
// forms and the CPU forms by about 0.4% (embedding.weight[1024]: 6.25 ×
// 1e-5 of the largest gradient beyond rtol 1e-4), where its unfused plan
// and both GPT plans agree to within 0.15 of that bound. Bisected against
// an f64 reference (the same model through codegen/jit, the same
// parameters and batch, one gradient phase): in f64 the GPU forms and the
// CPU forms agree to 1e-10 of the largest gradient, and in f32 the GPU
// forms stay within 5e-5 of it from f64 in every tensor, while the default
// CPU forms are off by up to 7.2e-3 of it (decoder.layers.1.linear1.weight,
// then .bias; every tensor below it in the backward inherits it). The
// losses agree to 9 digits. So the defect is in the f32 CPU forms'
// backward of the fused post-LN plan, not in the GPU forms; not yet found
// (issue 11 stays open for it).
var knownGPUFormsGaps = map[string]string{
	"transformer": "fused TransformerLM: the f32 CPU forms' gradients are off the f64 reference (the GPU forms are not); open defect, issue 11",
}

func init() {
	row := func(T int, open func(d runtime.Device, b int, s seqBatch) (genModel, error)) genPackage {
		return genPackage{1, 2, func(d runtime.Device, b int) (genModel, error) {
			return open(d, b, newSeqBatch(b, T, 0))
		}}
	}
	lm, g := decl.LMConfig().SeqLen, decl.GPTConfig().SeqLen
	genPackages["transformer"] = row(lm, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := transformer.New(d, transformer.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.x, s.y) }}, err
	})
	genPackages["transformer_unfused"] = row(lm, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := transformer_unfused.New(d, transformer_unfused.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.x, s.y) }}, err
	})
	genPackages["gpt"] = row(g, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := gpt.New(d, gpt.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.y) }}, err
	})
	genPackages["gpt_unfused"] = row(g, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := gpt_unfused.New(d, gpt_unfused.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.y) }}, err
	})
}
