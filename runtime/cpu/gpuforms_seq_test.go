package cpu_test

import (
	"math/rand/v2"

	"github.com/ngen-ml/ngen/generated/charlm"
	"github.com/ngen-ml/ngen/generated/charlm_unfused"
	"github.com/ngen-ml/ngen/generated/lstm"
	"github.com/ngen-ml/ngen/generated/lstm_unfused"
	"github.com/ngen-ml/ngen/generated/lstmbench"
	"github.com/ngen-ml/ngen/generated/lstmbench_unfused"
	"github.com/ngen-ml/ngen/generated/rnn"
	"github.com/ngen-ml/ngen/generated/rnn_unfused"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/data"
)

// The sequence models' rows of genPackages. Their steps take token ids
// (and states), not the suite's floats: each adapter holds a fixed batch
// of its own and ignores the suite's. The recurrence kernels take their
// GPU form under GPUForms and their one-thread-block form (a tile of
// sequences) by default, so the comparison covers both.
func init() {
	row := func(T, state int, open func(d runtime.Device, b int, s seqBatch) (genModel, error)) genPackage {
		return genPackage{1, 8, func(d runtime.Device, b int) (genModel, error) {
			return open(d, b, newSeqBatch(b, T, state))
		}}
	}
	genPackages["rnn"] = row(16, 0, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := rnn.New(d, rnn.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.mask, s.class) }}, err
	})
	genPackages["rnn_unfused"] = row(16, 0, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := rnn_unfused.New(d, rnn_unfused.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.mask, s.class) }}, err
	})
	genPackages["charlm"] = row(64, 0, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := charlm.New(d, charlm.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.y) }}, err
	})
	genPackages["charlm_unfused"] = row(64, 0, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := charlm_unfused.New(d, charlm_unfused.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.y) }}, err
	})
	genPackages["lstmbench"] = row(64, 0, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := lstmbench.New(d, lstmbench.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.y) }}, err
	})
	genPackages["lstmbench_unfused"] = row(64, 0, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := lstmbench_unfused.New(d, lstmbench_unfused.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.y) }}, err
	})
	genPackages["lstm"] = row(1, 2*128, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := lstm.New(d, lstm.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.h, s.c, s.y[:b]) }}, err
	})
	genPackages["lstm_unfused"] = row(1, 2*128, func(d runtime.Device, b int, s seqBatch) (genModel, error) {
		m, err := lstm_unfused.New(d, lstm_unfused.Options{Batch: b, Seed: 7})
		return adapt{m, func() (float32, error) { return m.Step(s.x, s.h, s.c, s.y[:b]) }}, err
	})
}

// adapt is a generated sequence model with its step bound to its batch.
type adapt struct {
	seqParams
	step func() (float32, error)
}

type seqParams interface {
	Params() []string
	Param(name string) ([]float32, error)
	Grad(name string) ([]float32, error)
	Close() error
}

func (a adapt) Step([]float32, []int32) (float32, error) { return a.step() }

// seqBatch is a fixed batch of b sequences of T token ids: next-token
// targets y, one class per sequence, an all-ones mask and initial states
// h, c of state elements per sequence.
type seqBatch struct {
	x, y, class, mask []int32
	h, c              []float32
}

func newSeqBatch(b, T, state int) seqBatch {
	rng := rand.New(rand.NewPCG(11, 12))
	vocab := min(data.WordVocab, data.CharVocab)
	s := seqBatch{x: make([]int32, b*T), y: make([]int32, b*T), class: make([]int32, b), mask: make([]int32, b*T),
		h: make([]float32, b*state), c: make([]float32, b*state)}
	for i := range s.x {
		s.x[i], s.y[i], s.mask[i] = int32(2+rng.IntN(vocab-2)), int32(2+rng.IntN(vocab-2)), 1
	}
	for i := range s.class {
		s.class[i] = int32(rng.IntN(len(data.WordLanguages)))
	}
	for i := range s.h {
		s.h[i], s.c[i] = rng.Float32()-0.5, rng.Float32()-0.5
	}
	return s
}
