//go:build cuda

package cuda

import (
	"math/rand/v2"

	"github.com/ngen-ml/ngen/generated/charlm"
	"github.com/ngen-ml/ngen/generated/charlm_unfused"
	"github.com/ngen-ml/ngen/generated/lstm"
	"github.com/ngen-ml/ngen/generated/lstm_unfused"
	"github.com/ngen-ml/ngen/generated/rnn"
	"github.com/ngen-ml/ngen/generated/rnn_unfused"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/data"
)

// The sequence models join the GPU suite's rows. Their steps take token
// ids (and states), not the suite's float images: each adapter holds a
// fixed batch of its own, drawn from the seed, and runs its first len(y)
// rows, so the suite's batch change (TestGraphsMatchEager's fourth step at
// half the batch, a second graph) reaches these models too.
func init() {
	genModels = append(genModels,
		genModel{"rnn", 1, 16,
			func(d runtime.Device, b int) (model, error) {
				m, err := rnn.New(d, rnn.Options{Batch: b, Seed: 7})
				return rnnRow{m, newSeqBatch(b, 16, data.WordVocab, 0, 0)}, err
			},
			func(d runtime.Device, b int) (model, error) {
				m, err := rnn_unfused.New(d, rnn_unfused.Options{Batch: b, Seed: 7})
				return rnnUnfusedRow{m, newSeqBatch(b, 16, data.WordVocab, 0, 0)}, err
			}},
		genModel{"charlm", 1, 8,
			func(d runtime.Device, b int) (model, error) {
				m, err := charlm.New(d, charlm.Options{Batch: b, Seed: 7})
				return charRow{m, newSeqBatch(b, 64, data.CharVocab, 0, 0)}, err
			},
			func(d runtime.Device, b int) (model, error) {
				m, err := charlm_unfused.New(d, charlm_unfused.Options{Batch: b, Seed: 7})
				return charUnfusedRow{m, newSeqBatch(b, 64, data.CharVocab, 0, 0)}, err
			}},
		genModel{"lstm", 1, 16,
			func(d runtime.Device, b int) (model, error) {
				m, err := lstm.New(d, lstm.Options{Batch: b, Seed: 7})
				return genRow{m, newSeqBatch(b, 1, data.CharVocab, 2, 128)}, err
			},
			func(d runtime.Device, b int) (model, error) {
				m, err := lstm_unfused.New(d, lstm_unfused.Options{Batch: b, Seed: 7})
				return genUnfusedRow{m, newSeqBatch(b, 1, data.CharVocab, 2, 128)}, err
			}},
	)
}

// seqBatch is a fixed batch: ids x [B, T], next-token (or class) targets
// y, an all-ones mask and initial states h, c [layers, B, hidden].
type seqBatch struct {
	x, y, yRow, mask     []int32
	h, c                 []float32
	b, T, layers, hidden int
}

func newSeqBatch(b, T, vocab, layers, hidden int) seqBatch {
	rng := rand.New(rand.NewPCG(11, 12))
	s := seqBatch{x: make([]int32, b*T), y: make([]int32, b*T), yRow: make([]int32, b), mask: make([]int32, b*T),
		h: make([]float32, layers*b*hidden), c: make([]float32, layers*b*hidden), b: b, T: T, layers: layers, hidden: hidden}
	for i := range s.x {
		s.x[i], s.y[i], s.mask[i] = int32(2+rng.IntN(vocab-2)), int32(2+rng.IntN(vocab-2)), 1
	}
	for i := range s.yRow {
		s.yRow[i] = int32(rng.IntN(len(data.WordLanguages)))
	}
	for i := range s.h {
		s.h[i], s.c[i] = rng.Float32()-0.5, rng.Float32()-0.5
	}
	return s
}

// first is the batch's first n rows (all of it when n ≥ B): the states
// keep their [layers, n, hidden] layout.
func (s seqBatch) first(n int) seqBatch {
	if n >= s.b {
		return s
	}
	r := s
	r.b = n
	r.x, r.y, r.mask, r.yRow = s.x[:n*s.T], s.y[:n*s.T], s.mask[:n*s.T], s.yRow[:n]
	r.h, r.c = nil, nil
	for l := 0; l < s.layers; l++ {
		off := l * s.b * s.hidden
		r.h = append(r.h, s.h[off:off+n*s.hidden]...)
		r.c = append(r.c, s.c[off:off+n*s.hidden]...)
	}
	return r
}

type rnnRow struct {
	*rnn.Model
	b seqBatch
}

func (r rnnRow) Step(_ []float32, y []int32) (float32, error) {
	b := r.b.first(len(y))
	return r.Model.Step(b.x, b.mask, b.yRow)
}

type rnnUnfusedRow struct {
	*rnn_unfused.Model
	b seqBatch
}

func (r rnnUnfusedRow) Step(_ []float32, y []int32) (float32, error) {
	b := r.b.first(len(y))
	return r.Model.Step(b.x, b.mask, b.yRow)
}

type charRow struct {
	*charlm.Model
	b seqBatch
}

func (r charRow) Step(_ []float32, y []int32) (float32, error) {
	b := r.b.first(len(y))
	return r.Model.Step(b.x, b.y)
}

type charUnfusedRow struct {
	*charlm_unfused.Model
	b seqBatch
}

func (r charUnfusedRow) Step(_ []float32, y []int32) (float32, error) {
	b := r.b.first(len(y))
	return r.Model.Step(b.x, b.y)
}

type genRow struct {
	*lstm.Model
	b seqBatch
}

func (r genRow) Step(_ []float32, y []int32) (float32, error) {
	b := r.b.first(len(y))
	return r.Model.Step(b.x, b.h, b.c, b.y)
}

type genUnfusedRow struct {
	*lstm_unfused.Model
	b seqBatch
}

func (r genUnfusedRow) Step(_ []float32, y []int32) (float32, error) {
	b := r.b.first(len(y))
	return r.Model.Step(b.x, b.h, b.c, b.y)
}
