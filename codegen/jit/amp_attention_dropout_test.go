package jit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/runtime"
)

// TestAMPAttentionDropoutForms: a bf16 attention with dropout on its
// weights (p 0.3, training) computes the same step in the host's GEMM form
// (16-bit heads widened for the sgemm) as in the GPU's flash form (the
// GPU forms under emulation): the masks are Philox's at the same indices
// in both, so the parameter's gradient agrees within bf16 roundings of
// f32 results summed in another order (1% of the largest; measured
// 9e-8); without dropout the gradient differs by far more (16%), so the
// mask is applied.
//
// Head size 16 takes the GPU's tensor-core form (attention_mma.go), which
// rounds the weights after dropout to bf16 (2^-8 relative) before P·V.
func TestAMPAttentionDropoutForms(t *testing.T) {
	for _, dh := range []int{4, 16} {
		t.Run(fmt.Sprintf("dh=%d", dh), func(t *testing.T) { ampAttentionDropoutForms(t, dh) })
	}
}

func ampAttentionDropoutForms(t *testing.T, dh int) {
	const b, T, heads = 2, 9, 2
	e := heads * dh
	host, gpu := hostAndGPUForms(t)
	rng := rand.New(rand.NewPCG(11, 12))
	x := make([]float32, b*T*3*e)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	grad := func(dev runtime.Device, p float64) []float64 {
		prog, err := compiler.Compile(ampAttentionModel(T, heads, dh, false, p), compiler.Options{Fuse: true})
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
