package transformer

import (
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/runtime"
)

// paddedEncoder is an embedding, one post-LN encoder layer whose
// self-attention reads a key padding mask (an i32 input), and a Linear
// to the vocabulary: attention's fourth operand, which TestAMPOracle's
// models do not have.
func paddedEncoder(h dsl.DType) *dsl.Model {
	const vocab, d, heads, t = 13, 16, 4, 7
	m := dsl.NewModel("padded_encoder")
	x := m.Tokens("x", dsl.Batch, t)
	pad := m.Tokens("pad", dsl.Batch, t)
	y := m.Tokens("y", dsl.Batch, t)
	w := m.Param("embedding.weight", dsl.F32, dsl.Normal(0, 1), vocab, d)
	o := dsl.TransformerDefaults()
	o.DimFeedforward, o.Dropout = 24, 0
	e := m.TransformerEncoderLayer("layer", dsl.Embed(w, x), heads, o, dsl.Masks{SrcKeyPadding: pad})
	logits := m.Linear("fc", e, vocab)
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(dsl.SGD{LR: 0.05, Momentum: 0.9})
	if h != dsl.F32 {
		m.Precision(dsl.AMP{Type: h})
	}
	return m
}

// TestAMPKeyPadding trains paddedEncoder in bf16 (host forms and the GPU
// forms under emulation) and in f32, from the same weights and batch (a
// random key padding mask that leaves every query's first key visible),
// and compares as TestAMPOracle does: bf16 against f32 within 2% (loss),
// 10% of the largest (step-1 gradients), 15% of the update's norm; the
// GPU forms against the host forms within 1e-5, 0.1%, 0.1%.
func TestAMPKeyPadding(t *testing.T) {
	dev, gpu := hostAndGPU(t, 2)
	im, err := paddedEncoder(dsl.BF16).Build()
	if err != nil {
		t.Fatal(err)
	}
	init, _, _ := ampOracleData(im, Config{SeqLen: 7}, "gpt")
	rng := rand.New(rand.NewPCG(41, 42))
	const T = 7
	ins := map[string][]int32{"x": tokensOf(rng, orB*T, orVocab), "y": tokensOf(rng, orB*T, orVocab), "pad": make([]int32, orB*T)}
	for i := range ins["pad"] {
		if i%T != 0 && rng.IntN(3) == 0 {
			ins["pad"][i] = 1
		}
	}
	run := func(dev runtime.Device, h dsl.DType) ampRun {
		s := session(t, dev, paddedEncoder(h), true, orB)
		defer s.Close()
		return ampTrain(t, s, init, ins)
	}
	bf16, gpuForms, f32 := run(dev, dsl.BF16), run(gpu, dsl.BF16), run(dev, dsl.F32)
	ampCompare(t, "bf16 vs f32", bf16, f32, init, 0.02, 0.10, 0.15)
	ampCompare(t, "GPU forms vs host forms", gpuForms, bf16, init, 1e-5, 1e-3, 1e-3)
}
