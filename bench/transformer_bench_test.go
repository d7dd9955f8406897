package bench

import (
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/generated/gpt"
	"github.com/ngen-ml/ngen/generated/gpt_unfused"
	"github.com/ngen-ml/ngen/generated/transformer"
	"github.com/ngen-ml/ngen/generated/transformer_unfused"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

var profile = flag.Bool("profile", false, "TestTransformerVsTorch and TestVsTorch: also print the per-kernel profile of the fused steps (runtime.WriteProfile)")

// tfCase is one Transformer model timed: its generated packages' steps on
// fixed random ids and its torch_step.py peer.
type tfCase struct {
	describe       string
	peer           seqPeer // its name, batch and sequence length
	fused, unfused func(t *testing.T) (step func() (float32, error), s *runtime.Session, close func())
}

// TestTransformerVsTorch times one training step of the two models of
// models/transformer at the sizes they are built at, in ngen (fused and
// unfused) and in PyTorch (bench/torch_models.py transformer_lm) in the
// same run, both in training mode: dropout 0.1 on the embeddings, the
// attention weights and every residual branch, cross-entropy at every
// position, Adam(lr 3e-4).
//
//   - gpt, the causal character LM: d_model 256, 4 pre-LN GELU layers, 4
//     heads, feed-forward 1024, tied output, T 128, batch 16 (the issue's
//     benchmark size, which is the model's own: models/transformer
//     GPTConfig).
//   - transformer, the seed TransformerLM: nn.Transformer(d_model 256, 4
//     heads, 2 encoder and 2 decoder layers, feed-forward 1024) on src and
//     tgt of T 64 each, batch 16 (LMConfig): the same width and depth as
//     gpt over as many tokens per sample.
//
// PyTorch runs under both malloc settings (runPeer keeps the faster) with
// OPENBLAS_CORETYPE unset (PyTorch at its best) and, when the environment
// pins it, under the pin too.
//
//	go test ./bench -run TestTransformerVsTorch -v -args -bench -threads 1 [-steps 10] [-model gpt|transformer]
func TestTransformerVsTorch(t *testing.T) {
	if !*run {
		t.Skip("benchmark: go test ./bench -run TestTransformerVsTorch -v -args -bench -threads N")
	}
	B := gptPeer.batch
	if transformerPeer.batch != B {
		t.Fatalf("the gpt and TransformerLM peers' batches differ (%d, %d); the ids below assume one", B, transformerPeer.batch)
	}
	os.Setenv("OPENBLAS_NUM_THREADS", fmt.Sprint(*threads))
	dev, err := cpu.New(cpu.Options{Threads: *threads})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	// ids are B×n random token ids; attention and GEMM kernels do not
	// depend on their values.
	draw := tokenIDs()
	ids := func(n int) []int32 { return draw(B * n) }
	gx, gy := ids(gptPeer.T), ids(gptPeer.T)
	src, tgt, ty := ids(transformerPeer.T), ids(transformerPeer.T), ids(transformerPeer.T)
	cases := []tfCase{
		{
			peer:     gptPeer,
			describe: "causal char LM (d_model 256, 4 pre-LN GELU layers, 4 heads, ff 1024, tied, T 128, batch 16, dropout 0.1, Adam)",
			fused: func(t *testing.T) (func() (float32, error), *runtime.Session, func()) {
				m, err := gpt.New(dev, gpt.Options{Batch: B, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				return func() (float32, error) { return m.Step(gx, gy) }, m.Session(), func() { m.Close() }
			},
			unfused: func(t *testing.T) (func() (float32, error), *runtime.Session, func()) {
				m, err := gpt_unfused.New(dev, gpt_unfused.Options{Batch: B, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				return func() (float32, error) { return m.Step(gx, gy) }, m.Session(), func() { m.Close() }
			},
		},
		{
			peer:     transformerPeer,
			describe: "seed TransformerLM (nn.Transformer d_model 256, 4 heads, 2+2 layers, ff 1024, src and tgt T 64, batch 16, dropout 0.1, Adam)",
			fused: func(t *testing.T) (func() (float32, error), *runtime.Session, func()) {
				m, err := transformer.New(dev, transformer.Options{Batch: B, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				return func() (float32, error) { return m.Step(src, tgt, ty) }, m.Session(), func() { m.Close() }
			},
			unfused: func(t *testing.T) (func() (float32, error), *runtime.Session, func()) {
				m, err := transformer_unfused.New(dev, transformer_unfused.Options{Batch: B, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				return func() (float32, error) { return m.Step(src, tgt, ty) }, m.Session(), func() { m.Close() }
			},
		},
	}
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
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for i, c := range cases {
		if *only != "" && c.peer.model != *only {
			continue
		}
		step, sess, done := c.fused(t)
		tf := timeIt(step)
		if *profile {
			profileSteps(t, c.peer.model, sess, func() error { _, err := step(); return err })
		}
		done()
		step, _, done = c.unfused(t)
		tu := timeIt(step)
		done()
		args := c.peer.args(*steps, 2)
		pin, pinned := os.LookupEnv("OPENBLAS_CORETYPE")
		os.Unsetenv("OPENBLAS_CORETYPE")
		best, alloc := runPeer(t, args)
		if pinned {
			os.Setenv("OPENBLAS_CORETYPE", pin)
		}
		if i == 0 || *only != "" {
			fmt.Printf("torch %s (%s)\n", best.Torch, best.BLAS)
		}
		fmt.Printf("%s, median of %d steps:\n", c.describe, *steps)
		fmt.Printf("  machine: %s, %d thread(s)\n", machine(), *threads)
		fmt.Printf("  ngen fused   %8.2f ms  ratio %.2fx PyTorch at its best\n", ms(tf), ms(tf)/best.Median)
		fmt.Printf("  ngen unfused %8.2f ms  ratio %.2fx PyTorch at its best\n", ms(tu), ms(tu)/best.Median)
		fmt.Printf("  PyTorch      %8.2f ms  (OPENBLAS_CORETYPE unset, glibc malloc %s)\n", best.Median, alloc)
		if pinned {
			tr, alloc := runPeer(t, args)
			fmt.Printf("  PyTorch      %8.2f ms  (OPENBLAS_CORETYPE=%s, glibc malloc %s; ngen fused %.2fx)\n", tr.Median, pin, alloc, ms(tf)/tr.Median)
		}
	}
}
