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

// TestAMPAttentionDropoutForms: a bf16 attention with dropout on its
// weights (p 0.3, training) computes the same step in the host's GEMM form
// (16-bit heads widened for the sgemm) as in the GPU's flash form (the
// GPU forms under emulation): the masks are Philox's at the same indices
// in both, so the parameter's gradient agrees within bf16 roundings of
// f32 results summed in another order (1% of the largest; measured
// 9e-8); without dropout the gradient differs by far more (16%), so the
// mask is applied.
func TestAMPAttentionDropoutForms(t *testing.T) {
	const b, T, heads, dh = 2, 9, 2, 4
	const e = heads * dh
	host, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	gpu, err := cpu.New(cpu.Options{Threads: 2, GPUForms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	rng := rand.New(rand.NewPCG(11, 12))
	x := make([]float32, b*T*3*e)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	grad := func(dev runtime.Device, p float64) []float64 {
		bld := irtest.New()
		in := bld.Input("x", ir.F32, ir.S("B"), ir.D(T), ir.D(3*e))
		w := bld.Param("w", ir.F32, 0.1, 3*e)
		xw := bld.Binary("mul", in, w)
		att := bld.Op("attention", ir.Attrs{Ints: []int{heads, dh, 0, e, 2 * e}, F: 1 / math.Sqrt(dh), F2: p, I: 1}, xw, xw, xw)
		loss := bld.Op("sum", ir.Attrs{}, bld.Op("slice", ir.Attrs{Axes: []int{2}, Ints: []int{0, e}}, att))
		m := bld.Model("amp_attention_dropout", loss, att, ir.Optimizer{Kind: "sgd", LR: 0.1})
		m.Precision = &ir.Precision{Type: ir.BF16, Pos: bld.Pos}
		prog, err := compiler.Compile(m, compiler.Options{Fuse: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, prog, runtime.SessionOptions{MaxBatch: b, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.WriteInput("x", x, b); err != nil {
			t.Fatal(err)
		}
		if err := s.Run("step", b); err != nil {
			t.Fatal(err)
		}
		return readNamed(t, s, "grad", "w")
	}
	hostG, gpuG, plain := grad(host, 0.3), grad(gpu, 0.3), grad(host, 0)
	big, diff, moved := 0.0, 0.0, 0.0
	for i := range hostG {
		big = math.Max(big, math.Abs(gpuG[i]))
		diff = math.Max(diff, math.Abs(hostG[i]-gpuG[i]))
		moved = math.Max(moved, math.Abs(hostG[i]-plain[i]))
	}
	t.Logf("host GEMM form against GPU flash form: %.3g of the largest gradient; dropout moves it by %.3g", diff/big, moved/big)
	if diff > 0.01*big {
		t.Errorf("the host form's gradient is %.3g from the GPU forms' (largest %.3g)", diff, big)
	}
	if moved < 0.1*big {
		t.Errorf("dropout moved the gradient by %.3g only (largest %.3g): is the mask applied?", moved, big)
	}
}
