package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/generated/lstmbench"
	"github.com/ngen-ml/ngen/generated/lstmbench_unfused"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/data"
)

// TestLSTMVsTorch times one training step of the LSTM language model
// (models/lstm Bench: embedding 128, 2 layers of 256, T 64, batch 32, the
// fortunes' character vocabulary, Adam) in ngen, fused and unfused, and of
// torch.nn.LSTM in the same run: PyTorch under both malloc settings
// (runPeer keeps the faster), with OPENBLAS_CORETYPE unset (OpenBLAS
// picks its kernels: PyTorch at its best) and, when the environment pins
// it, under the pin too.
//
//	go test ./bench -run TestLSTMVsTorch -v -args -bench -threads 1
func TestLSTMVsTorch(t *testing.T) {
	if !*run {
		t.Skip("benchmark: go test ./bench -run TestLSTMVsTorch -v -args -bench -threads N")
	}
	B, T := lstmPeer.batch, lstmPeer.T
	os.Setenv("OPENBLAS_NUM_THREADS", fmt.Sprint(*threads))
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
	fused, err := lstmbench.New(dev, lstmbench.Options{Batch: B, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fused.Close()
	unfused, err := lstmbench_unfused.New(dev, lstmbench_unfused.Options{Batch: B, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer unfused.Close()
	timeIt := func(step func() (float32, error)) time.Duration {
		for i := 0; i < 2; i++ {
			if _, err := step(); err != nil {
				t.Fatal(err)
			}
		}
		var ts []time.Duration
		for i := 0; i < *steps; i++ {
			t0 := time.Now()
			if _, err := step(); err != nil {
				t.Fatal(err)
			}
			ts = append(ts, time.Since(t0))
		}
		return median(ts)
	}
	tf := timeIt(func() (float32, error) { return fused.Step(x, y) })
	tu := timeIt(func() (float32, error) { return unfused.Step(x, y) })
	args := lstmPeer.args(*steps, 2)
	pin, pinned := os.LookupEnv("OPENBLAS_CORETYPE")
	os.Unsetenv("OPENBLAS_CORETYPE")
	best, alloc := runPeer(t, args)
	if pinned {
		os.Setenv("OPENBLAS_CORETYPE", pin)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Printf("torch %s (%s)\n", best.Torch, best.BLAS)
	fmt.Printf("LSTM language model (emb 128, 2x256, T %d, batch %d, vocab %d, Adam), median of %d steps:\n", T, B, data.CharVocab, *steps)
	fmt.Printf("  machine: %s, %d thread(s)\n", machine(), *threads)
	fmt.Printf("  ngen fused   %8.2f ms  ratio %.2fx PyTorch at its best\n", ms(tf), ms(tf)/best.Median)
	fmt.Printf("  ngen unfused %8.2f ms  ratio %.2fx PyTorch at its best\n", ms(tu), ms(tu)/best.Median)
	fmt.Printf("  PyTorch      %8.2f ms  (OPENBLAS_CORETYPE unset, glibc malloc %s)\n", best.Median, alloc)
	if pinned {
		tr, alloc := runPeer(t, args)
		fmt.Printf("  PyTorch      %8.2f ms  (OPENBLAS_CORETYPE=%s, glibc malloc %s; ngen fused %.2fx)\n", tr.Median, pin, alloc, ms(tf)/tr.Median)
	}
}
