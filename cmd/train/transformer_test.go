package main

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ngen-ml/ngen/generated/gpt"
	tfmodels "github.com/ngen-ml/ngen/models/transformer"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/data"
)

// untrainedBPC is the validation bits per character of a freshly
// initialised model of the row: what one epoch must improve on.
func untrainedBPC(t *testing.T, name, dir string, batch int, seed uint64) float64 {
	task := seqTasks[name]
	sets, err := task.load(dir)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := runtime.OpenDevice("cpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m, err := task.new(dev, batch, seed)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ev, err := evaluate(m, sets.Val, batch)
	if err != nil {
		t.Fatal(err)
	}
	return ev.bpc
}

func TestPairWindows(t *testing.T) {
	ids := make([]int32, 50)
	for i := range ids {
		ids[i] = int32(i + 1)
	}
	s, err := pairWindows(ids, 4)
	if err != nil {
		t.Fatal(err)
	}
	if s.N != 6 || s.T != 8 || s.YPer != 4 {
		t.Fatalf("N %d T %d YPer %d, want 6 8 4", s.N, s.T, s.YPer)
	}
	for i := 0; i < s.N; i++ {
		x, y := s.X[i*8:(i+1)*8], s.Y[i*4:(i+1)*4]
		if !slices.Equal(x, ids[i*8:(i+1)*8]) {
			t.Fatalf("window %d: x %v", i, x)
		}
		// y is tgt (x[4:]) shifted by one: nothing the encoder (x[:4]) sees.
		if !slices.Equal(y, ids[i*8+5:i*8+9]) {
			t.Fatalf("window %d: y %v, want the character after each of tgt %v", i, y, x[4:])
		}
	}
	if _, err := pairWindows(ids[:8], 4); err == nil {
		t.Fatal("8 tokens made a window of 2×4 with a target after it")
	}
}

func TestTransformerTrain(t *testing.T) {
	dir := tinyFortunes(t, 16)
	before := untrainedBPC(t, "transformer", dir, 16, 2)
	o := seqOptions{epochs: 1, batch: 16, seed: 2, threads: 1, device: "cpu", dir: dir, quiet: true}
	res, err := runSeq("transformer", seqTasks["transformer"], o)
	if err != nil {
		t.Fatal(err)
	}
	if bpc := res[0].BPC; !(bpc > 0 && bpc < before) {
		t.Fatalf("validation bits per character %v after an epoch, %v untrained", bpc, before)
	}
}

func TestGPTTrainAndSample(t *testing.T) {
	dir := tinyFortunes(t, 16)
	before := untrainedBPC(t, "gpt", dir, 16, 2)
	var ckpt bytes.Buffer
	o := seqOptions{epochs: 1, batch: 16, seed: 2, threads: 1, device: "cpu", dir: dir, quiet: true, trained: &ckpt}
	res, err := runSeq("gpt", seqTasks["gpt"], o)
	if err != nil {
		t.Fatal(err)
	}
	if bpc := res[0].BPC; !(bpc > 0 && bpc < before) {
		t.Fatalf("validation bits per character %v after an epoch, %v untrained", bpc, before)
	}
	dev, err := runtime.OpenDevice("cpu", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()

	// The sampler reads the logits at the last real position of a
	// left-aligned context: they must not depend on what follows it.
	T := tfmodels.GPTConfig().SeqLen
	g, err := gpt.New(dev, gpt.Options{Batch: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Load(bytes.NewReader(ckpt.Bytes())); err != nil {
		t.Fatal(err)
	}
	g.Eval()
	x := make([]int32, T)
	for i := range x {
		x[i] = data.CharID(rune('a' + i%26))
	}
	const last = 9
	a, err := g.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	for i := last + 1; i < T; i++ {
		x[i] = data.PadID
	}
	b, err := g.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	V := len(a) / T
	for c := 0; c < V; c++ {
		if d := math.Abs(float64(a[last*V+c] - b[last*V+c])); d > 1e-5 {
			t.Fatalf("logit %d at position %d moved by %g when the positions after it changed", c, last, d)
		}
	}

	// A prompt longer than the context, so that the window slides.
	prompt := strings.Repeat("the cat sat on a mat ", 7)[:T-5]
	gen := func(seed uint64, temperature float64) string {
		s, err := sampleGPT(dev, bytes.NewReader(ckpt.Bytes()), prompt, 12, temperature, seed)
		if err != nil {
			t.Fatal(err)
		}
		if n := utf8.RuneCountInString(s); n != 12 {
			t.Fatalf("generated %d characters, want 12", n)
		}
		return s
	}
	s7, s7again, s8 := gen(7, 1), gen(7, 1), gen(8, 1)
	if s7 != s7again {
		t.Fatalf("seed 7 twice gave different text:\n%q\n%q", s7, s7again)
	}
	if s7 == s8 {
		t.Fatalf("seeds 7 and 8 gave the same text %q", s7)
	}
	if g0, g1 := gen(7, 0), gen(8, 0); g0 != g1 {
		t.Fatalf("temperature 0 depends on the seed:\n%q\n%q", g0, g1)
	}
	if _, err := sampleGPT(dev, strings.NewReader("not a checkpoint"), "x", 5, 1, 1); err == nil || !strings.Contains(err.Error(), "-load") {
		t.Fatalf("bad checkpoint: err = %v", err)
	}
}

func TestTransformerSampleRefused(t *testing.T) {
	err := trainSeq("transformer", seqTasks["transformer"], seqOptions{epochs: 1}, "8", false, false, "", sampleOptions{on: true})
	if err == nil || !strings.Contains(err.Error(), "-sample") {
		t.Fatalf("transformer -sample: err = %v", err)
	}
}
