package bench

import (
	"math/rand/v2"
	"os"
	"testing"

	"github.com/ngen-ml/ngen/generated/lstmbench"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/data"
)

// TestLSTMProfile prints the per-step profile of the fused LSTM language
// model's training step (the model TestLSTMVsTorch times), to see where
// its time goes.
//
//	go test ./bench -run TestLSTMProfile -v -args -bench -threads 1 -steps 5
func TestLSTMProfile(t *testing.T) {
	if !*run {
		t.Skip("benchmark: go test ./bench -run TestLSTMProfile -v -args -bench -threads N")
	}
	const B, T = 32, 64
	dev, err := cpu.New(cpu.Options{Threads: *threads})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	x, y := make([]int32, B*T), make([]int32, B*T)
	for i := range x {
		x[i], y[i] = int32(2+rng.IntN(data.CharVocab-2)), int32(2+rng.IntN(data.CharVocab-2))
	}
	m, err := lstmbench.New(dev, lstmbench.Options{Batch: B, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Step(x, y); err != nil {
		t.Fatal(err)
	}
	m.Session().SetProfiling(true)
	for i := 0; i < *steps; i++ {
		if _, err := m.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	if err := runtime.WriteProfile(os.Stdout, m.Session().Profile()); err != nil {
		t.Fatal(err)
	}
}
