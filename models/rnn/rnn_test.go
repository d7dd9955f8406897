package rnn_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/generated/rnn"
	"github.com/ngen-ml/ngen/generated/rnn_unfused"
	"github.com/ngen-ml/ngen/models/seqoracle"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/data"
)

const T = 16 // models/rnn Seed.T

// batch is n words of random lengths, left-padded as data.LoadWords pads.
func batch(n int, seed uint64) (x, mask, y []int32) {
	rng := rand.New(rand.NewPCG(seed, 1))
	x, mask, y = make([]int32, n*T), make([]int32, n*T), make([]int32, n)
	for r := 0; r < n; r++ {
		l := 1 + rng.IntN(T)
		for t := T - l; t < T; t++ {
			x[r*T+t], mask[r*T+t] = int32(2+rng.IntN(data.WordVocab-2)), 1
		}
		y[r] = int32(rng.IntN(len(data.WordLanguages)))
	}
	return x, mask, y
}

func TestFusedMatchesUnfused(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	a, err := rnn.New(dev, rnn.Options{Batch: 8, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := rnn_unfused.New(dev, rnn_unfused.Options{Batch: 8, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	x, mask, y := batch(8, 2)
	// The same arithmetic; sums over the batch and the steps split
	// differently between fused and unfused kernels: rtol 1e-5; atol for
	// gradients near zero, which Adam turns into steps of up to lr.
	seqoracle.MatchSteps(t, a, b, 3,
		func() (float32, error) { return a.Step(x, mask, y) },
		func() (float32, error) { return b.Step(x, mask, y) }, 1e-5, 1e-6)
}

// TestBadInput: a token id out of range, a sequence of the wrong length
// and an input of the wrong shape are errors that name the op or input
// and its line in models/rnn/model.go, and leave every parameter as it
// was.
func TestBadInput(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m, err := rnn.New(dev, rnn.Options{Batch: 4, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, mask, y := batch(4, 3)
	before := seqoracle.Snapshot(t, m)
	var ckpt bytes.Buffer
	if err := m.Save(&ckpt); err != nil {
		t.Fatal(err)
	}

	bad := append([]int32(nil), x...)
	bad[2*T+T-1] = int32(data.WordVocab) // one past the vocabulary
	_, err = m.Step(bad, mask, y)
	seqoracle.BadInput(t, "token id out of range", err, "embedding", seqoracle.Line(t, "models/rnn/model.go", "m.Embedding("), "out of range")
	seqoracle.Unchanged(t, "a step on a bad token id", m, before)
	_, err = m.Predict(bad, mask)
	seqoracle.BadInput(t, "Predict of a bad token id", err, "embedding", "out of range")
	// Issue 27: a failed Predict, and every successful one, moved
	// ngen.dropout_counter; inference now leaves the checkpoint as it was.
	if _, err := m.Predict(x, mask); err != nil {
		t.Fatal(err)
	}
	var after bytes.Buffer
	if err := m.Save(&after); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after.Bytes(), ckpt.Bytes()) {
		t.Fatal("Predict changed the checkpoint")
	}

	_, err = m.Step(x[:4*T-3], mask[:4*T-3], y) // sequences of 15¾ tokens
	seqoracle.BadInput(t, "wrong sequence length", err, `input "x"`, seqoracle.Line(t, "models/rnn/model.go", `m.Tokens("x"`), "i32[B,16]")
	_, err = m.Step(x[:3*T], mask, y) // 3 sequences of x, 4 of mask
	seqoracle.BadInput(t, "inputs of different batches", err, `"mask"`, seqoracle.Line(t, "models/rnn/model.go", `m.Tokens("mask"`), "i32[B,16]")
	seqoracle.Unchanged(t, "steps on inputs of the wrong shape", m, before)

	// The model still trains.
	if _, err := m.Step(x, mask, y); err != nil {
		t.Fatal(err)
	}
}
