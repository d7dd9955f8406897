package jit

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// BenchmarkCheckpoint times a training step of the 24-layer, 512-wide MLP
// of docs/PERF.md with runs of 5 hidden layers checkpointed and without,
// on the CPU backend at batch 128:
//
//	go test ./codegen/jit -run '^$' -bench Checkpoint -benchtime 20x
func BenchmarkCheckpoint(b *testing.B) {
	const batch = 128
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, batch*784)
	y := make([]int32, batch)
	for i := range x {
		x[i] = rng.Float32()
	}
	for i := range y {
		y[i] = int32(rng.IntN(10))
	}
	for _, seg := range []int{0, 5} {
		p, err := compiler.Compile(irtest.DeepMLP(ir.F32, 784, 512, 24, 10, 0, irtest.Adam, seg), compiler.Options{Fuse: true, RefBatch: batch})
		if err != nil {
			b.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: batch, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("mlp24/segment=%d", seg), func(b *testing.B) {
			step := func() {
				if err := s.WriteInput("x", x, batch); err != nil {
					b.Fatal(err)
				}
				if err := s.WriteInput("y", y, batch); err != nil {
					b.Fatal(err)
				}
				if err := s.Run("step", batch); err != nil {
					b.Fatal(err)
				}
			}
			step()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step()
			}
			b.ReportMetric(float64(s.ArenaBytes()), "arena-bytes")
		})
		s.Close()
	}
}

// BenchmarkCheckpointLSTM is the same for the 8-layer LSTM of docs/PERF.md
// (T 35, 64 features, width 256, batch 64), each layer its own segment.
// The recurrence runs slowly on the CPU backend (about 10 s a step on the
// 2-core VM): run it with -benchtime 2x.
func BenchmarkCheckpointLSTM(b *testing.B) {
	const batch, T, E = 64, 35, 64
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	x := make([]float32, batch*T*E)
	y := make([]int32, batch)
	for i := range x {
		x[i] = rng.Float32()
	}
	for i := range y {
		y[i] = int32(rng.IntN(10))
	}
	for _, seg := range []int{0, 1} {
		p, err := compiler.Compile(irtest.DeepLSTM(ir.F32, T, E, 256, 8, 10, seg), compiler.Options{Fuse: true, RefBatch: batch})
		if err != nil {
			b.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: batch, Seed: 1})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("lstm8/segment=%d", seg), func(b *testing.B) {
			step := func() {
				if err := s.WriteInput("x", x, batch); err != nil {
					b.Fatal(err)
				}
				if err := s.WriteInput("y", y, batch); err != nil {
					b.Fatal(err)
				}
				if err := s.Run("step", batch); err != nil {
					b.Fatal(err)
				}
			}
			step()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				step()
			}
			b.ReportMetric(float64(s.ArenaBytes()), "arena-bytes")
		})
		s.Close()
	}
}
