// Package transformer declares the seed Transformer language models: the
// encoder–decoder TransformerLM with torch.nn.Transformer's defaults and a
// decoder-only (GPT-style) causal character model, both over the
// character vocabulary of the fortunes corpus (runtime/data).
package transformer

//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated model.go
//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated -fuse=none -suffix=_unfused model.go

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/runtime/data"
)

// Config sizes a model.
type Config struct {
	Name                 string
	Vocab, DModel, Heads int
	EncLayers, DecLayers int // TransformerLM; DecLayers is the GPT's depth
	FF, SeqLen, MaxLen   int
	Dropout, LR          float64
	TieWeights           bool // GPT: the output projection is the embedding's transpose
	DType                dsl.DType
	// Optimizer, when set, replaces Adam{LR} (tests: parameter groups).
	Optimizer dsl.Optimizer
}

// optimizer is c's optimizer: Adam at c.LR unless c.Optimizer is set.
func (c Config) optimizer() dsl.Optimizer {
	if c.Optimizer != nil {
		return c.Optimizer
	}
	return dsl.Adam{LR: c.LR, Clip: dsl.ClipGradNorm(math.Inf(1))}
}

// LMConfig is the seed TransformerLM's size.
func LMConfig() Config {
	return Config{Name: "transformer", Vocab: data.CharVocab, DModel: 256, Heads: 4, EncLayers: 2, DecLayers: 2,
		FF: 1024, SeqLen: 64, MaxLen: 512, Dropout: 0.1, LR: 3e-4, DType: dsl.F32}
}

// GPTConfig is the causal character model's size (the benchmark:
// d_model 256, 4 layers, 4 heads, T 128).
func GPTConfig() Config {
	return Config{Name: "gpt", Vocab: data.CharVocab, DModel: 256, Heads: 4, DecLayers: 4,
		FF: 1024, SeqLen: 128, MaxLen: 512, Dropout: 0.1, LR: 3e-4, TieWeights: true, DType: dsl.F32}
}

// TransformerLM is the seed model.
func TransformerLM() *dsl.Model { return NewTransformerLM(LMConfig()) }

// GPT is the decoder-only causal character model.
func GPT() *dsl.Model { return NewGPT(GPTConfig()) }

// NewTransformerLM declares forward(src, tgt) as the seed trains it:
// Embedding (shared by source and target, scaled by √d_model), sinusoidal
// PositionalEncoding with dropout, torch.nn.Transformer (post-LN, ReLU,
// final LayerNorms, dropout) with a causal mask on the decoder, a Linear
// to the vocabulary; cross-entropy against y at every target position,
// Adam.
func NewTransformerLM(c Config) *dsl.Model {
	m := dsl.NewModel(c.Name)
	src := m.Tokens("src", dsl.Batch, c.SeqLen)
	tgt := m.Tokens("tgt", dsl.Batch, c.SeqLen)
	y := m.Tokens("y", dsl.Batch, c.SeqLen)
	w := m.Param("embedding.weight", c.DType, dsl.Normal(0, 1), c.Vocab, c.DModel)
	embed := func(ids *dsl.Tensor) *dsl.Tensor {
		return m.PositionalEncoding("pos_encoder", dsl.Scale(dsl.Embed(w, ids), math.Sqrt(float64(c.DModel))), c.MaxLen, c.Dropout)
	}
	o := dsl.TransformerDefaults()
	o.DimFeedforward, o.Dropout = c.FF, c.Dropout
	h := m.Transformer("transformer", embed(src), embed(tgt), c.Heads, c.EncLayers, c.DecLayers, o, dsl.Masks{TgtCausal: true})
	logits := m.Linear("fc_out", h, c.Vocab)
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(c.optimizer())
	return m
}

// NewGPT declares the causal language model: token embedding, sinusoidal
// positions with dropout, DecLayers pre-LN GELU blocks of causal
// self-attention, a final LayerNorm, and logits through the embedding's
// transpose (TieWeights) or a Linear head; cross-entropy over every
// position, Adam.
func NewGPT(c Config) *dsl.Model {
	m := dsl.NewModel(c.Name)
	x := m.Tokens("x", dsl.Batch, c.SeqLen)
	y := m.Tokens("y", dsl.Batch, c.SeqLen)
	w := m.Param("tok_emb.weight", c.DType, dsl.Normal(0, 0.02), c.Vocab, c.DModel)
	h := m.PositionalEncoding("pos_encoder", dsl.Embed(w, x), c.MaxLen, c.Dropout)
	for i := 0; i < c.DecLayers; i++ {
		h = m.DecoderOnlyBlock(blockName(i), h, c.Heads, c.FF, c.Dropout)
	}
	h = m.LayerNorm("ln_f", h)
	var logits *dsl.Tensor
	if c.TieWeights {
		logits = dsl.MatMulT(h, w, false, true)
	} else {
		logits = m.Linear("head", h, c.Vocab)
	}
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(c.optimizer())
	return m
}

func blockName(i int) string { return fmt.Sprintf("blocks.%d", i) }
