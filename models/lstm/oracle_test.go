package lstm_test

import (
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/lstm"
	"github.com/ngen-ml/ngen/models/seqoracle"
)

// TestLSTMOracle compares the generator (from non-zero h0, c0) and the
// language model at odd sizes (vocab 37, embedding 11, hidden 13, T 7, 2
// layers, batch 3) with torch.nn.LSTM: the forward results (logits, hn,
// cn), every gradient of the first step and every parameter after 3 Adam
// steps, each fused and unfused.
func TestLSTMOracle(t *testing.T) {
	const B, T, H, L, V = 3, 7, 13, 2, 37
	rng := rand.New(rand.NewPCG(7, 8))
	x := make([]int32, B*T)
	next := make([]int32, B*T)
	for i := range x {
		x[i], next[i] = int32(rng.IntN(V)), int32(rng.IntN(V))
	}
	state := func() []float64 {
		s := make([]float64, L*B*H)
		for i := range s {
			s[i] = rng.Float64() - 0.5
		}
		return s
	}
	h0, c0 := state(), state()
	sizes := map[string]int{"vocab": V, "emb": 11, "hidden": H, "layers": L, "T": T}
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
			s := lstm.Sizes{Vocab: V, Emb: 11, Hidden: H, Layers: L, T: T, DType: c.dt}
			t.Run("generator", func(t *testing.T) {
				seqoracle.Check(t, seqoracle.Case{
					Kind: "lstm", Model: lstm.Generator("lstm_oracle_"+c.dt.String(), s), Rows: B, Steps: 3, Sizes: sizes,
					Inputs: map[string]any{"x": x, "y": next[:B], "h0": h0, "c0": c0},
					RTol:   c.rtol, ATol: c.atol,
				})
			})
			t.Run("charlm", func(t *testing.T) {
				seqoracle.Check(t, seqoracle.Case{
					Kind: "charlm", Model: lstm.LanguageModel("charlm_oracle_"+c.dt.String(), s), Rows: B, Steps: 3, Sizes: sizes,
					Inputs: map[string]any{"x": x, "y": next},
					RTol:   c.rtol, ATol: c.atol,
				})
			})
		})
	}
}
