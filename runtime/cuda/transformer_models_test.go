//go:build cuda

package cuda

import (
	"github.com/ngen-ml/ngen/generated/gpt"
	"github.com/ngen-ml/ngen/generated/gpt_unfused"
	"github.com/ngen-ml/ngen/generated/transformer"
	"github.com/ngen-ml/ngen/generated/transformer_unfused"
	decl "github.com/ngen-ml/ngen/models/transformer"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/data"
)

// The Transformer models join the GPU suite's rows (TestModelsGPUvsCPU,
// TestModelsFusedVsUnfusedGPU, TestGraphsMatchEager, and the CPU-only
// TestCompareStepsHarness): the seed TransformerLM (forward(src, tgt),
// src = tgt as runtime/cpu's GPU-forms rows) and the causal GPT, fused
// and unfused, at their declared sequence lengths. Like the sequence rows
// (seq_models_test.go) each adapter holds a token batch of its own; it
// runs the first len(y) sequences of it, so the suite's batch change
// (TestGraphsMatchEager's fourth step at half the batch) reaches these
// models too.
func init() {
	lm, g := decl.LMConfig().SeqLen, decl.GPTConfig().SeqLen
	genModels = append(genModels,
		genModel{"transformer", 1, 4,
			func(d runtime.Device, b int) (model, error) {
				m, err := transformer.New(d, transformer.Options{Batch: b, Seed: 7})
				return tfRow{m.Step, m, newSeqBatch(b, lm, data.CharVocab, 0, 0), lm}, err
			},
			func(d runtime.Device, b int) (model, error) {
				m, err := transformer_unfused.New(d, transformer_unfused.Options{Batch: b, Seed: 7})
				return tfRow{m.Step, m, newSeqBatch(b, lm, data.CharVocab, 0, 0), lm}, err
			}},
		genModel{"gpt", 1, 4,
			func(d runtime.Device, b int) (model, error) {
				m, err := gpt.New(d, gpt.Options{Batch: b, Seed: 7})
				return gptRow{m.Step, m, newSeqBatch(b, g, data.CharVocab, 0, 0), g}, err
			},
			func(d runtime.Device, b int) (model, error) {
				m, err := gpt_unfused.New(d, gpt_unfused.Options{Batch: b, Seed: 7})
				return gptRow{m.Step, m, newSeqBatch(b, g, data.CharVocab, 0, 0), g}, err
			}},
	)
}

// params is what a generated model offers besides its step.
type params interface {
	Params() []string
	Param(name string) ([]float32, error)
	Grad(name string) ([]float32, error)
	Close() error
}

// tfRow is an encoder–decoder TransformerLM row: Step(src, tgt, y).
type tfRow struct {
	step func(src, tgt, y []int32) (float32, error)
	params
	b seqBatch
	T int
}

func (r tfRow) Step(_ []float32, y []int32) (float32, error) {
	n := min(len(y), len(r.b.x)/r.T) * r.T
	return r.step(r.b.x[:n], r.b.x[:n], r.b.y[:n])
}

// gptRow is a causal LM row: Step(x, y).
type gptRow struct {
	step func(x, y []int32) (float32, error)
	params
	b seqBatch
	T int
}

func (r gptRow) Step(_ []float32, y []int32) (float32, error) {
	n := min(len(y), len(r.b.x)/r.T) * r.T
	return r.step(r.b.x[:n], r.b.y[:n])
}
