package jit

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestCheckpointBitForBit trains a deep MLP with dropout (and a 3-layer
// LSTM) for a few steps with its hidden layers checkpointed (recomputed in
// backward) and without: every loss and parameter is the same, bit for
// bit, fused and unfused.
func TestCheckpointBitForBit(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const in, width, layers, classes, batch = 20, 32, 7, 5, 16
	rng := rand.New(rand.NewPCG(3, 4))
	x := make([]float32, batch*in)
	y := make([]int32, batch)
	for i := range x {
		x[i] = rng.Float32()
	}
	for i := range y {
		y[i] = int32(rng.IntN(classes))
	}
	lstm := false
	train := func(fuse bool, segment int) ([]uint32, map[string][]uint32) {
		m := irtest.DeepMLP(ir.F32, in, width, layers, classes, 0.2, irtest.Adam, segment)
		if lstm {
			m = irtest.DeepLSTM(ir.F32, 4, in/4, 8, 3, classes, segment)
		}
		p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatal(err)
		}
		re := 0
		for _, v := range p.Step.Values {
			if v.Phase == "re" {
				re++
			}
		}
		if (re > 0) != (segment > 0) {
			t.Fatalf("segment %d: %d recomputed values", segment, re)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: batch, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		var losses []uint32
		for range 3 {
			if err := s.WriteInput("x", x, batch); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteInput("y", y, batch); err != nil {
				t.Fatal(err)
			}
			if err := s.Run("step", batch); err != nil {
				t.Fatal(err)
			}
			i, _ := s.Lookup("output", "loss")
			v, _ := s.ReadFloats(i)
			losses = append(losses, math.Float32bits(float32(v[0])))
		}
		ps := map[string][]uint32{}
		for _, n := range s.Names("param") {
			i, _ := s.Lookup("param", n)
			v, _ := s.ReadFloats(i)
			for _, f := range v {
				ps[n] = append(ps[n], math.Float32bits(float32(f)))
			}
		}
		return losses, ps
	}
	for _, c := range []struct {
		fuse, lstm bool
		segs       []int
	}{{true, false, []int{1, 2, 3}}, {false, false, []int{1, 2, 3}}, {true, true, []int{1, 2}}} {
		fuse := c.fuse
		lstm = c.lstm
		l0, p0 := train(fuse, 0)
		for _, seg := range c.segs {
			l1, p1 := train(fuse, seg)
			for i := range l0 {
				if l0[i] != l1[i] {
					t.Fatalf("fuse=%v segment %d: loss %d: %v, want %v", fuse, seg, i, math.Float32frombits(l1[i]), math.Float32frombits(l0[i]))
				}
			}
			for n, w := range p0 {
				for i := range w {
					if p1[n][i] != w[i] {
						t.Fatalf("fuse=%v segment %d: %s[%d] = %v, want %v", fuse, seg, n, i, math.Float32frombits(p1[n][i]), math.Float32frombits(w[i]))
					}
				}
			}
		}
	}
}
