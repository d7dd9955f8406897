package lstm_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/generated/charlm"
	"github.com/ngen-ml/ngen/generated/charlm_unfused"
	"github.com/ngen-ml/ngen/generated/lstm"
	"github.com/ngen-ml/ngen/generated/lstm_unfused"
	"github.com/ngen-ml/ngen/models/seqoracle"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/data"
)

const T, L, H = 64, 2, 128 // models/lstm Seed

func ids(n int, seed uint64) []int32 {
	rng := rand.New(rand.NewPCG(seed, 1))
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(2 + rng.IntN(data.CharVocab-2))
	}
	return x
}

func floats(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 2))
	x := make([]float32, n)
	for i := range x {
		x[i] = rng.Float32() - 0.5
	}
	return x
}

func TestFusedMatchesUnfused(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const B = 4
	// The same arithmetic; sums over the batch and the steps split
	// differently between fused and unfused kernels: rtol 1e-5; atol for
	// gradients near zero, which Adam turns into steps of up to lr.
	t.Run("charlm", func(t *testing.T) {
		a, err := charlm.New(dev, charlm.Options{Batch: B, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := charlm_unfused.New(dev, charlm_unfused.Options{Batch: B, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		x, y := ids(B*T, 1), ids(B*T, 2)
		seqoracle.MatchSteps(t, a, b, 3,
			func() (float32, error) { return a.Step(x, y) },
			func() (float32, error) { return b.Step(x, y) }, 1e-5, 1e-6)
	})
	t.Run("generator", func(t *testing.T) {
		a, err := lstm.New(dev, lstm.Options{Batch: B, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		b, err := lstm_unfused.New(dev, lstm_unfused.Options{Batch: B, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		x, y, h0, c0 := ids(B, 3), ids(B, 4), floats(L*B*H, 5), floats(L*B*H, 6)
		seqoracle.MatchSteps(t, a, b, 3,
			func() (float32, error) { return a.Step(x, h0, c0, y) },
			func() (float32, error) { return b.Step(x, h0, c0, y) }, 1e-5, 1e-6)
	})
}

// TestBadInput: a token id out of range, a sequence of the wrong length
// and initial states of the wrong shape are errors that name the op or
// input and its line in models/lstm/model.go, and leave every parameter as
// it was.
func TestBadInput(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const B = 3
	m, err := lstm.New(dev, lstm.Options{Batch: 2 * B, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, y, h0, c0 := ids(B, 1), ids(B, 2), floats(L*B*H, 3), floats(L*B*H, 4)
	before := seqoracle.Snapshot(t, m)
	bad := []int32{x[0], -1, x[2]}
	_, err = m.Step(bad, h0, c0, y)
	seqoracle.BadInput(t, "token id out of range", err, "embedding", seqoracle.Line(t, "models/lstm/model.go", "m.Embedding("), "out of range")
	seqoracle.Unchanged(t, "a step on a bad token id", m, before)

	_, err = m.Step(ids(2*B, 5), h0, c0, y) // sequences of 2 tokens, not 1
	seqoracle.BadInput(t, "wrong sequence length", err, `"h0"`, seqoracle.Line(t, "models/lstm/model.go", `h0 := m.Input("h0"`), "f32[2,B,128]")
	_, err = m.Step(x, h0[:B*H], c0, y) // one layer's state
	seqoracle.BadInput(t, "initial state of the wrong shape", err, `"h0"`, seqoracle.Line(t, "models/lstm/model.go", `h0 := m.Input("h0"`), "f32[2,B,128]")
	_, err = m.Predict(x, h0, c0[:len(c0)-1])
	seqoracle.BadInput(t, "initial state of the wrong shape", err, `"c0"`, seqoracle.Line(t, "models/lstm/model.go", `c0 := m.Input("c0"`), "f32[2,B,128]")
	seqoracle.Unchanged(t, "steps on inputs of the wrong shape", m, before)
	// Issue 27: one NaN in h0 gave non-finite logits and a nil error from
	// Predict, while Step refused it.
	nan := append([]float32(nil), h0...)
	nan[5] = float32(math.NaN())
	_, err = m.Predict(x, nan, c0)
	seqoracle.BadInput(t, "a NaN in h0", err, `input "h0"`, seqoracle.Line(t, "models/lstm/model.go", `h0 := m.Input("h0"`), "element 5 is NaN")
	if _, err := m.Step(x, nan, c0, y); err == nil {
		t.Fatal("Step with a NaN in h0 succeeded")
	}
	seqoracle.Unchanged(t, "a NaN in h0", m, before)
	if _, err := m.Step(x, h0, c0, y); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointFeedsGenerator: the language model's checkpoint loads into
// the generator (the same parameter names), and the generator fed a window
// one character per call, carrying (hn, cn) into (h0, c0), gives the
// language model's logits at the window's last position.
func TestCheckpointFeedsGenerator(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	lm, err := charlm.New(dev, charlm.Options{Batch: 1, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer lm.Close()
	x := ids(T, 7)
	if _, err := lm.Step(x, ids(T, 8)); err != nil { // weights that differ from the generator's seed
		t.Fatal(err)
	}
	lm.Eval()
	want, err := lm.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	var ckpt bytes.Buffer
	if err := lm.Save(&ckpt); err != nil {
		t.Fatal(err)
	}
	g, err := lstm.New(dev, lstm.Options{Batch: 1, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Load(&ckpt); err != nil {
		t.Fatal(err)
	}
	g.Eval()
	s := g.Session()
	hn, _ := s.Lookup("output", "hn")
	cn, _ := s.Lookup("output", "cn")
	h, c := make([]float32, L*H), make([]float32, L*H)
	var got []float32
	for _, id := range x {
		if got, err = g.Predict([]int32{id}, h, c); err != nil {
			t.Fatal(err)
		}
		if err := s.Read(hn, h); err != nil {
			t.Fatal(err)
		}
		if err := s.Read(cn, c); err != nil {
			t.Fatal(err)
		}
	}
	last := want[(T-1)*data.CharVocab:]
	for i := range got {
		// The same f32 arithmetic, one step per call against one loop:
		// the GEMMs group the sums differently. rtol 1e-4.
		if d := got[i] - last[i]; d > 1e-4+1e-4*abs(last[i]) || -d > 1e-4+1e-4*abs(last[i]) {
			t.Fatalf("logit %d after %d calls: %v, the language model's %v", i, T, got[i], last[i])
		}
	}
}

func abs(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}
