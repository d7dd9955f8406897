// Package lstm declares the seed LSTM character models on Debian's
// fortunes corpus (runtime/data): the generator, which carries its state
// (h, c) from call to call as torch's forward(x, h0, c0) does, and the
// character language model that trains the generator's weights.
package lstm

//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated model.go
//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated -fuse=none -suffix=_unfused model.go

import (
	"math"

	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/runtime/data"
)

// Sizes are a model's widths. T is the sequence length, fixed when the
// model is built.
type Sizes struct {
	Vocab, Emb, Hidden, Layers, T int
	DType                         dsl.DType
	// Optimizer replaces the seed's Adam(lr 2e-3) (the mixed-precision
	// oracle trains with SGD); nil keeps it.
	Optimizer dsl.Optimizer
}

// optimizer is s.Optimizer, or the seed's.
func (s Sizes) optimizer() dsl.Optimizer {
	if s.Optimizer != nil {
		return s.Optimizer
	}
	return dsl.Adam{LR: 2e-3, Clip: dsl.ClipGradNorm(math.Inf(1))}
}

// Seed are the seed models' sizes: the corpus's characters, two layers
// of 128, windows of 64 characters for training. An epoch over the
// corpus's 2.5 million training characters takes a few minutes on one
// core.
var Seed = Sizes{Vocab: data.CharVocab, Emb: 32, Hidden: 128, Layers: 2, T: 64, DType: dsl.F32}

// BenchSizes are the training benchmark's (bench/): embedding 128, two
// layers of 256, T 64.
var BenchSizes = Sizes{Vocab: data.CharVocab, Emb: 128, Hidden: 256, Layers: 2, T: 64, DType: dsl.F32}

// LSTM is the seed generator, one character per call: Embedding(vocab,
// 32) → LSTM(32, 128, num_layers=2, batch_first) from the states h0, c0
// → Linear(128, vocab) on the last position, cross-entropy against the
// next character, Adam(lr 2e-3). Its outputs hn and cn are the next
// call's h0 and c0. Parameters are named as CharLM's, so a checkpoint of
// CharLM loads into it.
func LSTM() *dsl.Model {
	s := Seed
	s.T = 1
	return Generator("lstm", s)
}

// CharLM is the seed character language model, the generator's training
// form: the same layers from zero states, the Linear at every position,
// the loss averaged over all positions of the window.
func CharLM() *dsl.Model { return LanguageModel("charlm", Seed) }

// Bench is CharLM at the benchmark's sizes.
func Bench() *dsl.Model { return LanguageModel("lstmbench", BenchSizes) }

// Generator is torch's forward(x, h0, c0) at any sizes: inputs x, i32
// token ids [B, T]; h0 and c0 [Layers, B, Hidden]; y, the class of the
// next token [B]. Outputs: the logits [B, Vocab] of the last position,
// hn and cn.
func Generator(name string, s Sizes) *dsl.Model {
	m := dsl.NewModel(name)
	x := m.Tokens("x", dsl.Batch, s.T)
	h0 := m.Input("h0", s.DType, s.Layers, dsl.Batch, s.Hidden)
	c0 := m.Input("c0", s.DType, s.Layers, dsl.Batch, s.Hidden)
	y := m.Labels("y", dsl.Batch)
	e := m.Embedding("emb", x, s.Vocab, s.Emb, s.DType)
	out, hn, cn := m.LSTM("lstm", e, s.Hidden, dsl.Recurrent{NumLayers: s.Layers, BatchFirst: true, H0: h0, C0: c0})
	logits := m.Linear("fc", dsl.Select(out, 1, s.T-1), s.Vocab)
	m.Output(logits)
	m.OutputNamed("hn", hn)
	m.OutputNamed("cn", cn)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(s.optimizer())
	return m
}

// LanguageModel is the training form at any sizes: inputs x, i32 token
// ids [B, T], and y, the next token at every position [B, T]; output the
// logits [B, T, Vocab].
func LanguageModel(name string, s Sizes) *dsl.Model {
	m := dsl.NewModel(name)
	x := m.Tokens("x", dsl.Batch, s.T)
	y := m.Labels("y", dsl.Batch, s.T)
	e := m.Embedding("emb", x, s.Vocab, s.Emb, s.DType)
	out, _, _ := m.LSTM("lstm", e, s.Hidden, dsl.Recurrent{NumLayers: s.Layers, BatchFirst: true})
	logits := m.Linear("fc", out, s.Vocab)
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(s.optimizer())
	return m
}
