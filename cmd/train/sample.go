package main

import (
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/ngen-ml/ngen/generated/lstm"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/data"
)

// sampleText generates length characters after prompt with the LSTM
// generator (package lstm: one character per call, its final states (hn,
// cn) the next call's (h0, c0)) from the weights in ckpt, a checkpoint of
// the character language model that -model lstm trains. Each character is
// drawn from softmax(logits / temperature) by a PCG seeded with seed, so a
// seed gives the same text every time; temperature 0 takes the most likely
// character.
func sampleText(dev runtime.Device, ckpt io.Reader, prompt string, length int, temperature float64, seed uint64) (string, error) {
	if temperature < 0 {
		return "", fmt.Errorf("-temperature %g: want >= 0", temperature)
	}
	if prompt == "" {
		prompt = "\n" // a fortune starts after a blank line
	}
	g, err := lstm.New(dev, lstm.Options{Batch: 1, Seed: seed})
	if err != nil {
		return "", err
	}
	defer g.Close()
	if err := g.Load(ckpt); err != nil {
		return "", fmt.Errorf("-load: %w", err)
	}
	g.Eval()
	s := g.Session()
	hn, err := s.Lookup("output", "hn")
	if err != nil {
		return "", err
	}
	cn, err := s.Lookup("output", "cn")
	if err != nil {
		return "", err
	}
	h := make([]float32, s.Elems(hn))
	c := make([]float32, s.Elems(cn))
	// step feeds one character and carries the state over.
	step := func(id int32) ([]float32, error) {
		logits, err := g.Predict([]int32{id}, h, c)
		if err != nil {
			return nil, err
		}
		if err := s.Read(hn, h); err != nil {
			return nil, err
		}
		return logits, s.Read(cn, c)
	}
	var logits []float32
	for _, r := range prompt {
		if logits, err = step(data.CharID(r)); err != nil {
			return "", err
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x5deece66d))
	var out strings.Builder
	p := make([]float64, len(logits))
	for i := 0; i < length; i++ {
		id := draw(logits, p, temperature, rng)
		out.WriteRune(data.CharOf(id))
		if logits, err = step(id); err != nil {
			return "", err
		}
	}
	return out.String(), nil
}

// draw picks a token from softmax(logits / temperature), never padding
// (id 0, which the corpus does not hold).
func draw(logits []float32, p []float64, temperature float64, rng *rand.Rand) int32 {
	best := 1
	for c := 2; c < len(logits); c++ {
		if logits[c] > logits[best] {
			best = c
		}
	}
	if temperature == 0 {
		return int32(best)
	}
	sum := 0.0
	for c := 1; c < len(logits); c++ {
		p[c] = math.Exp((float64(logits[c]) - float64(logits[best])) / temperature)
		sum += p[c]
	}
	u := rng.Float64() * sum
	for c := 1; c < len(logits); c++ {
		if u -= p[c]; u < 0 {
			return int32(c)
		}
	}
	return int32(best)
}
