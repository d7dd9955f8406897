package rnn_test

import (
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/rnn"
	"github.com/ngen-ml/ngen/models/seqoracle"
)

// TestRNNOracle compares the classifier at odd sizes (vocab 37, embedding
// 11, hidden 13, T 7, 2 layers, batch 3, a non-zero h0, one word left-padded
// by two steps) with torch.nn.RNN: the forward results, every gradient of
// the first step and every parameter after 3 Adam steps, each fused and
// unfused.
func TestRNNOracle(t *testing.T) {
	const B, T, H, L = 3, 7, 13, 2
	rng := rand.New(rand.NewPCG(5, 6))
	x, mask := make([]int32, B*T), make([]int32, B*T)
	for i := range x {
		x[i], mask[i] = int32(rng.IntN(37)), 1
	}
	mask[T], mask[T+1], x[T], x[T+1] = 0, 0, 0, 0 // row 1 is a word of 5
	h0 := make([]float64, L*B*H)
	for i := range h0 {
		h0[i] = rng.Float64() - 0.5
	}
	y := []int32{4, 0, 2}
	for _, c := range []struct {
		dt         dsl.DType
		rtol, atol float64
	}{
		// f32 GEMMs and sums in another order than PyTorch's, through 7
		// steps of 2 layers and 3 Adam steps: rtol 1e-4; atol for values
		// near zero.
		{dsl.F32, 1e-4, 1e-6},
		// f64: the same sums, 2^-52 rounding.
		{dsl.F64, 1e-9, 1e-12},
	} {
		t.Run(c.dt.String(), func(t *testing.T) {
			s := rnn.Sizes{Vocab: 37, Emb: 11, Hidden: H, T: T, Classes: 5, Layers: L, InitialState: true, DType: c.dt}
			seqoracle.Check(t, seqoracle.Case{
				Kind: "rnn", Model: rnn.Classifier("rnn_oracle_"+c.dt.String(), s), Rows: B, Steps: 3,
				Sizes:  map[string]int{"vocab": 37, "emb": 11, "hidden": H, "layers": L, "T": T, "classes": 5},
				Inputs: map[string]any{"x": x, "mask": mask, "y": y, "h0": h0},
				RTol:   c.rtol, ATol: c.atol,
			})
		})
	}
}
