//go:build cuda

package bench

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/generated/gpt"
	"github.com/ngen-ml/ngen/generated/gpt_unfused"
	"github.com/ngen-ml/ngen/generated/lstmbench"
	"github.com/ngen-ml/ngen/generated/lstmbench_unfused"
	"github.com/ngen-ml/ngen/generated/transformer"
	"github.com/ngen-ml/ngen/generated/transformer_unfused"
	"github.com/ngen-ml/ngen/models/builds"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/data"
)

// TestGPUSeq is TestGPU for the sequence models, at the sizes their CPU
// benchmarks use (TestLSTMVsTorch, TestTransformerVsTorch):
//
//	go test -tags cuda ./bench -run TestGPUSeq -v -args -bench [-model gpt] [-steps 30]
//
// For each model it prints the fused and unfused steps' median wall time
// on the GPU and PyTorch's same step on the same GPU (torch_step.py
// --device cuda: cuDNN's LSTM, nn.Transformer's kernels; f32 without TF32
// on both sides).
func TestGPUSeq(t *testing.T) {
	dev, peak := openGPU(t, "TestGPUSeq")
	const B = 16
	draw := tokenIDs()
	ids := func(b, n int) []int32 { return draw(b * n) }
	lx, ly := ids(32, 64), ids(32, 64)
	gx, gy := ids(B, 128), ids(B, 128)
	src, tgt, ty := ids(B, 64), ids(B, 64), ids(B, 64)
	type stepFn = func() (float32, error)
	type seqCase struct {
		name, describe string
		batch, seq     int
		fused, unfused func() (stepFn, *runtime.Session, func() error, error)
	}
	cases := []seqCase{
		{"lstmbench", "LSTM language model (emb 128, 2x256, T 64, batch 32, Adam)", 32, 64,
			func() (stepFn, *runtime.Session, func() error, error) {
				m, err := lstmbench.New(dev, lstmbench.Options{Batch: 32, Seed: 1})
				if err != nil {
					return nil, nil, nil, err
				}
				return func() (float32, error) { return m.Step(lx, ly) }, m.Session(), m.Close, nil
			},
			func() (stepFn, *runtime.Session, func() error, error) {
				m, err := lstmbench_unfused.New(dev, lstmbench_unfused.Options{Batch: 32, Seed: 1})
				if err != nil {
					return nil, nil, nil, err
				}
				return func() (float32, error) { return m.Step(lx, ly) }, m.Session(), m.Close, nil
			}},
		{"gpt", "causal char LM (d_model 256, 4 layers, 4 heads, T 128, batch 16, dropout 0.1, Adam)", B, 128,
			func() (stepFn, *runtime.Session, func() error, error) {
				m, err := gpt.New(dev, gpt.Options{Batch: B, Seed: 1})
				if err != nil {
					return nil, nil, nil, err
				}
				return func() (float32, error) { return m.Step(gx, gy) }, m.Session(), m.Close, nil
			},
			func() (stepFn, *runtime.Session, func() error, error) {
				m, err := gpt_unfused.New(dev, gpt_unfused.Options{Batch: B, Seed: 1})
				if err != nil {
					return nil, nil, nil, err
				}
				return func() (float32, error) { return m.Step(gx, gy) }, m.Session(), m.Close, nil
			}},
		{"transformer", "seed TransformerLM (d_model 256, 4 heads, 2+2 layers, src and tgt T 64, batch 16, dropout 0.1, Adam)", B, 64,
			func() (stepFn, *runtime.Session, func() error, error) {
				m, err := transformer.New(dev, transformer.Options{Batch: B, Seed: 1})
				if err != nil {
					return nil, nil, nil, err
				}
				return func() (float32, error) { return m.Step(src, tgt, ty) }, m.Session(), m.Close, nil
			},
			func() (stepFn, *runtime.Session, func() error, error) {
				m, err := transformer_unfused.New(dev, transformer_unfused.Options{Batch: B, Seed: 1})
				if err != nil {
					return nil, nil, nil, err
				}
				return func() (float32, error) { return m.Step(src, tgt, ty) }, m.Session(), m.Close, nil
			}},
	}
	// timeIt returns the median step and, with prof, the per-launch rows.
	timeIt := func(mk func() (stepFn, *runtime.Session, func() error, error), prof bool) (time.Duration, []kernelRow) {
		t0 := time.Now()
		step, sess, closeFn, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		open := time.Since(t0)
		defer func() {
			if err := closeFn(); err != nil {
				t.Error(err)
			}
		}()
		for i := 0; i < 5; i++ {
			t0 := time.Now()
			if _, err := step(); err != nil {
				t.Fatal(err)
			}
			if i == 0 && prof {
				coldStart(open, time.Since(t0))
			}
		}
		var ts []time.Duration
		for i := 0; i < *steps; i++ {
			t0 := time.Now()
			if _, err := step(); err != nil { // reads the loss back: synchronised
				t.Fatal(err)
			}
			ts = append(ts, time.Since(t0))
		}
		if !prof {
			return median(ts), nil
		}
		rows, err := profileSession(dev, sess, func() error { _, err := step(); return err })
		if err != nil {
			t.Fatal(err)
		}
		return median(ts), rows
	}
	for _, c := range cases {
		if *only != "" && c.name != *only {
			continue
		}
		tf, rows := timeIt(c.fused, true)
		tu, _ := timeIt(c.unfused, false)
		fmt.Printf("\n%s, median of %d steps:\n", c.describe, *steps)
		fmt.Printf("  ngen fused   %8.3f ms\n  ngen unfused %8.3f ms\n", ms(tf), ms(tu))
		peer := benchCase{name: c.name, batch: c.batch,
			torchArgs: []string{"--model", c.name, "--vocab", fmt.Sprint(data.CharVocab), "--seq", fmt.Sprint(c.seq)}}
		tr, err := torchGPU(peer)
		if err != nil {
			fmt.Printf("  PyTorch on the GPU: not measured: %v\n", err)
		} else {
			fmt.Printf("  PyTorch      %8.3f ms (%s, same GPU); ngen fused/PyTorch %.2fx\n", tr.Median, tr.Torch, ms(tf)/tr.Median)
		}
		if c.name == "lstmbench" {
			timeLoopForm(t, dev, tf, timeIt, lx, ly)
		}
		fmt.Println("  fused step, per launch (GPU time from CUDA events):")
		if err := writeRows(os.Stdout, rows, peak, tf); err != nil {
			t.Fatal(err)
		}
	}
}

// timeLoopForm times the LSTM LM with its recurrences in the other GPU
// form than its generated package's: the whole loop in one launch, a
// block per sequence (ops.StepNever, compiled now by NVRTC), against the
// package's stepped form (a time step a launch), so that a GPU window
// measures both (issue 26, item 2).
func timeLoopForm(t *testing.T, dev runtime.Device, stepped time.Duration,
	timeIt func(func() (func() (float32, error), *runtime.Session, func() error, error), bool) (time.Duration, []kernelRow),
	x, y []int32) {
	g, err := builds.RegisterForm("lstmbench", ops.StepNever)
	if err != nil {
		fmt.Printf("  ngen fused, loop form: not built: %v\n", err)
		return
	}
	tl, _ := timeIt(func() (func() (float32, error), *runtime.Session, func() error, error) {
		m, err := g.New(dev, runtime.SessionOptions{MaxBatch: 32, Seed: 1})
		if err != nil {
			return nil, nil, nil, err
		}
		in := runtime.Inputs{"x": x, "y": y}
		return func() (float32, error) { l, err := m.Step(in); return float32(l), err }, m.Session(), m.Close, nil
	}, false)
	fmt.Printf("  ngen fused, recurrences in the loop form (a block per sequence) %8.3f ms; the stepped form (the package's) / loop form %.2fx\n", ms(tl), ms(stepped)/ms(tl))
}
