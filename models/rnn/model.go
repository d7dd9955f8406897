// Package rnn declares the seed recurrent classifier: the language of a
// word (runtime/data's word lists, characters as tokens).
package rnn

//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated model.go
//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated -fuse=none -suffix=_unfused model.go

import (
	"math"

	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/runtime/data"
)

// Sizes are a classifier's widths.
type Sizes struct {
	Vocab, Emb, Hidden, T, Classes int
	Layers                         int // default 1
	// InitialState adds the input h0 [Layers, B, Hidden] (else zeros).
	InitialState bool
	DType        dsl.DType
}

// Seed are the seed classifier's sizes: the word task's characters, words
// of up to 16 of them, five languages. Small enough that an epoch over
// 100 000 words takes well under a minute on one core.
var Seed = Sizes{Vocab: data.WordVocab, Emb: 32, Hidden: 128, T: 16, Classes: len(data.WordLanguages), DType: dsl.F32}

// RNN is the seed model: Embedding(vocab, 32) → RNN(32, 128, tanh) → the
// last hidden state → Linear(128, 5), cross-entropy, Adam(lr 1e-3).
// Words are left-padded: the i32 mask [B, T] is 0 at padding, where the
// state carries over unchanged, so padding never changes the result.
func RNN() *dsl.Model { return Classifier("rnn", Seed) }

// Classifier is the seed model at any sizes (the oracle tests use odd
// ones). Its inputs: x, i32 token ids [B, T]; mask, i32 [B, T]; with
// InitialState, h0; y, the class [B]. The last layer's final state feeds
// the Linear; every layer's, hn [Layers, B, Hidden], is an output too.
func Classifier(name string, s Sizes) *dsl.Model {
	m := dsl.NewModel(name)
	x := m.Tokens("x", dsl.Batch, s.T)
	mask := m.Tokens("mask", dsl.Batch, s.T)
	y := m.Labels("y", dsl.Batch)
	e := m.Embedding("emb", x, s.Vocab, s.Emb, s.DType)
	layers := max(s.Layers, 1)
	var h0 *dsl.Tensor
	if s.InitialState {
		h0 = m.Input("h0", s.DType, layers, dsl.Batch, s.Hidden)
	}
	_, hn := m.RNN("rnn", e, s.Hidden, dsl.Recurrent{NumLayers: layers, BatchFirst: true, H0: h0, Mask: mask})
	logits := m.Linear("fc", dsl.Select(hn, 0, layers-1), s.Classes)
	m.Output(logits)
	m.OutputNamed("hn", hn)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(dsl.Adam{LR: 1e-3, Clip: dsl.ClipGradNorm(math.Inf(1))})
	return m
}
