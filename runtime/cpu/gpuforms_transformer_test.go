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
