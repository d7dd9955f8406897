package jit

import (
	"fmt"
	"math"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestReduceHostAccuracy checks that the CPU backend's f32 reductions are
// as accurate as one rounding of the exact sum. It runs them with
// one-thread blocks, one thread summing an output's whole range in order;
// in f32 that sum's error grew with its length (1.5e-5 and 5.4e-4 of
// these means of 25600 and 65536 values), and batch norm's variance, E[d²] - E[d]²,
// cancelled it into the gradients below: fuzz seed 1164's conv weight
// gradient was 9% off PyTorch's and the GPU forms'. The host forms now
// accumulate f32 in double. Both shapes: per channel (a batch norm's
// statistics, several reduced axes) and over everything (one axis).
func TestReduceHostAccuracy(t *testing.T) {
	for _, c := range []struct {
		name  string
		shape []int
		axes  []int // of the mean; the loss sums what it leaves
	}{
		{"per channel", []int{1024, 3, 5, 5}, []int{0, 2, 3}},
		{"all", []int{64, 1024}, nil},
	} {
		for _, baseline := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/baseline=%v", c.name, baseline), func(t *testing.T) {
				dev, err := cpu.New(cpu.Options{Threads: 2, Baseline: baseline})
				if err != nil {
					t.Fatal(err)
				}
				defer dev.Close()
				b := irtest.New()
				x := b.Param("x", ir.F32, 1, c.shape...)
				loss := b.Op("sum", ir.Attrs{}, b.Op("mean", ir.Attrs{Axes: c.axes}, x))
				m := b.Model("reduceacc", loss, x, ir.Optimizer{Kind: "sgd", LR: 0})
				p, err := compiler.Compile(m, compiler.Options{Fuse: true})
				if err != nil {
					t.Fatal(err)
				}
				s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 1, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				n := 1
				for _, d := range c.shape {
					n *= d
				}
				// Values in [1, 2) that f32 holds exactly, so the exact sum
				// is what float64 gives.
				xs := make([]float64, n)
				for i := range xs {
					xs[i] = float64(float32(1.1 + 0.0001*float64(i%10)))
				}
				pi, err := s.Lookup("param", "x")
				if err != nil {
					t.Fatal(err)
				}
				if err := s.WriteFloats(pi, xs); err != nil {
					t.Fatal(err)
				}
				if err := s.Run("step", 1); err != nil {
					t.Fatal(err)
				}
				want := 0.0
				if c.axes == nil {
					for _, v := range xs {
						want += v
					}
					want /= float64(n)
				} else {
					// [N, C, H·W]: each channel's mean, then their sum.
					ch, hw := c.shape[1], c.shape[2]*c.shape[3]
					for k := range ch {
						sum := 0.0
						for i := k * hw; i < n; i += ch * hw {
							for j := range hw {
								sum += xs[i+j]
							}
						}
						want += sum / float64(n/ch)
					}
				}
				got := readNamed(t, s, "output", "loss")[0]
				// Each mean rounded once to f32, and the sum of the three
				// per-channel means rounded twice: 4 half-ulps at most.
				d := math.Abs(got - want)
				if d > 2.5e-7*math.Abs(want) {
					t.Errorf("loss %.9g, exact %.9g: relative error %.2g, more than f32's rounding of the result", got, want, d/math.Abs(want))
				}
			})
		}
	}
}
