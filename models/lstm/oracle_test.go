package lstm_test

import (
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/lstm"
	"github.com/ngen-ml/ngen/models/seqoracle"
)

// The oracle's odd sizes: batch, steps, hidden, layers, vocabulary.
const orB, orT, orH, orL, orV = 3, 7, 13, 2, 37

// oracleData draws the token ids, their next tokens and the initial
// states h0 and c0 from seed.
func oracleData(seed uint64) (x, next []int32, h0, c0 []float64, sizes map[string]int) {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	x = make([]int32, orB*orT)
	next = make([]int32, orB*orT)
	for i := range x {
		x[i], next[i] = int32(rng.IntN(orV)), int32(rng.IntN(orV))
	}
	state := func() []float64 {
		s := make([]float64, orL*orB*orH)
		for i := range s {
			s[i] = rng.Float64() - 0.5
		}
		return s
	}
	h0, c0 = state(), state()
	return x, next, h0, c0, map[string]int{"vocab": orV, "emb": 11, "hidden": orH, "layers": orL, "T": orT}
}

// TestLSTMOracle compares the generator (from non-zero h0, c0) and the
// language model at odd sizes (vocab 37, embedding 11, hidden 13, T 7, 2
// layers, batch 3) with torch.nn.LSTM: the forward results (logits, hn,
// cn), every gradient of the first step and every parameter after 3 Adam
// steps, each fused and unfused.
func TestLSTMOracle(t *testing.T) {
	x, next, h0, c0, sizes := oracleData(7)
	for _, c := range []struct {
		dt         dsl.DType
		rtol, atol float64
	}{
		// f32 GEMMs and sums in another order than PyTorch's, through 7
		// steps of 2 layers and 3 Adam steps: rtol 1e-4; atol for values
		// near zero.
		{dsl.F32, 1e-4, 1e-6},
		// f64: sums in another order, 2^-52 rounding.
		{dsl.F64, 1e-9, 1e-12},
	} {
		t.Run(c.dt.String(), func(t *testing.T) {
			s := lstm.Sizes{Vocab: orV, Emb: 11, Hidden: orH, Layers: orL, T: orT, DType: c.dt}
			t.Run("generator", func(t *testing.T) {
				seqoracle.Check(t, seqoracle.Case{
					Kind: "lstm", Model: lstm.Generator("lstm_oracle_"+c.dt.String(), s), Rows: orB, Steps: 3, Sizes: sizes,
					Inputs: map[string]any{"x": x, "y": next[:orB], "h0": h0, "c0": c0},
					RTol:   c.rtol, ATol: c.atol,
				})
			})
			t.Run("charlm", func(t *testing.T) {
				seqoracle.Check(t, seqoracle.Case{
					Kind: "charlm", Model: lstm.LanguageModel("charlm_oracle_"+c.dt.String(), s), Rows: orB, Steps: 3, Sizes: sizes,
					Inputs: map[string]any{"x": x, "y": next},
					RTol:   c.rtol, ATol: c.atol,
				})
			})
		})
	}
}
