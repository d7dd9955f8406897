package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strings"

	"github.com/ngen-ml/ngen/generated/gpt"
	tfmodels "github.com/ngen-ml/ngen/models/transformer"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/data"
)

// The two models of models/transformer as rows of seqTasks, next to the
// LSTM's: the generic sequence loop (seq.go) trains them on the fortunes;
// -torch trains bench/torch_models.py's transformer_lm on the same windows.

func init() {
	// The causal character model: windows of its SeqLen, y the next
	// character at every position, exactly as the LSTM's.
	seqTasks["gpt"] = seqTask{vocab: data.CharVocab, dataDir: data.DefaultFortunesDir,
		load: func(dir string) (*seqSets, error) {
			return fortuneSets(dir, func(ids []int32) (*data.Sequences, error) {
				return data.Windows(ids, tfmodels.GPTConfig().SeqLen)
			})
		},
		pkg: "gpt", feed: tokens}
	// The encoder–decoder TransformerLM, trained as the seed does with
	// forward(src, tgt) and a causal mask on the decoder. The encoder sees
	// every src position, so src must not hold what the decoder predicts:
	// each sequence is a window of 2T characters, src its first T, tgt the
	// next T, and y the character after each tgt position (tgt shifted by
	// one, its last the character after the window). The encoder thus
	// gives the T characters of context before tgt, and nothing leaks.
	seqTasks["transformer"] = seqTask{vocab: data.CharVocab, dataDir: data.DefaultFortunesDir,
		load: func(dir string) (*seqSets, error) {
			return fortuneSets(dir, func(ids []int32) (*data.Sequences, error) {
				return pairWindows(ids, tfmodels.LMConfig().SeqLen)
			})
		},
		pkg: "transformer", feed: srcTgt(tfmodels.LMConfig().SeqLen)}
	seqSamplers["gpt"] = sampleGPT
}

// fortuneSets loads the fortunes and cuts both splits with windows.
func fortuneSets(dir string, windows func([]int32) (*data.Sequences, error)) (*seqSets, error) {
	text, err := data.LoadFortunes(dir)
	if err != nil {
		return nil, err
	}
	tr, err := windows(text.Train)
	if err != nil {
		return nil, err
	}
	val, err := windows(text.Val)
	if err != nil {
		return nil, err
	}
	return &seqSets{Train: tr, Val: val}, nil
}

// pairWindows cuts ids into windows of 2T: X [N, 2T] is src then tgt, Y
// [N, T] the character after each tgt position.
func pairWindows(ids []int32, T int) (*data.Sequences, error) {
	if T < 1 {
		return nil, fmt.Errorf("fortunes: sequence length %d must be positive", T)
	}
	n := (len(ids) - 1) / (2 * T)
	if n < 1 {
		return nil, fmt.Errorf("fortunes: %d tokens make no src+tgt window of 2×%d", len(ids), T)
	}
	s := &data.Sequences{X: make([]int32, n*2*T), Y: make([]int32, n*T), N: n, T: 2 * T, YPer: T}
	for i := 0; i < n; i++ {
		at := i * 2 * T
		copy(s.X[i*2*T:(i+1)*2*T], ids[at:at+2*T])
		copy(s.Y[i*T:(i+1)*T], ids[at+T+1:at+2*T+1])
	}
	return s, nil
}

// srcTgt feeds the TransformerLM: each row of pairWindows split into src
// (its first t tokens) and tgt (the next t).
func srcTgt(t int) func(b seqBatch, predict bool) runtime.Inputs {
	return func(b seqBatch, predict bool) runtime.Inputs {
		rows := len(b.X) / (2 * t)
		src, tgt := make([]int32, 0, rows*t), make([]int32, 0, rows*t)
		for r := 0; r < rows; r++ {
			row := b.X[r*2*t : (r+1)*2*t]
			src = append(src, row[:t]...)
			tgt = append(tgt, row[t:]...)
		}
		if predict {
			return runtime.Inputs{"src": src, "tgt": tgt}
		}
		return runtime.Inputs{"src": src, "tgt": tgt, "y": b.Y}
	}
}

// sampleGPT generates length characters after prompt with the causal
// model's weights from ckpt (a -model gpt checkpoint). The context, the
// last SeqLen characters, is left-aligned at positions 0.. as in training
// and padded after its end; the next character is read from the logits at
// the last real position. The model is causal, so the padding after it
// cannot change those logits, and positions mean what they meant in
// training (left-padding would shift them and put padding into the
// attention). Each character is drawn as sampleText draws (softmax of
// logits / temperature, a PCG seeded with seed), so a seed gives the same
// text every time. One Predict per character: no key/value cache.
func sampleGPT(dev runtime.Device, ckpt io.Reader, prompt string, length int, temperature float64, seed uint64) (string, error) {
	if temperature < 0 {
		return "", fmt.Errorf("-temperature %g: want >= 0", temperature)
	}
	if prompt == "" {
		prompt = "\n" // a fortune starts after a blank line
	}
	T := tfmodels.GPTConfig().SeqLen
	g, err := gpt.New(dev, gpt.Options{Batch: 1, Seed: seed})
	if err != nil {
		return "", err
	}
	defer g.Close()
	if err := g.Load(ckpt); err != nil {
		return "", fmt.Errorf("-load: %w", err)
	}
	g.Eval()
	var ctx []int32
	for _, r := range prompt {
		ctx = append(ctx, data.CharID(r))
	}
	rng := rand.New(rand.NewPCG(seed, 0x5deece66d))
	x := make([]int32, T)
	var p []float64
	var out strings.Builder
	for i := 0; i < length; i++ {
		w := ctx[max(0, len(ctx)-T):]
		copy(x, w)
		for k := len(w); k < T; k++ {
			x[k] = data.PadID
		}
		logits, err := g.Predict(x)
		if err != nil {
			return "", err
		}
		V := len(logits) / T
		if p == nil {
			p = make([]float64, V)
		}
		id := draw(logits[(len(w)-1)*V:len(w)*V], p, temperature, rng)
		out.WriteRune(data.CharOf(id))
		ctx = append(ctx, id)
	}
	return out.String(), nil
}
