package jit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/codegen"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
)

// TestAttentionMMAForm runs 16-bit attention's tensor-core form
// (compiler/ops/attention_mma.go: wmma tiles, emulated on the CPU) under
// the GPU forms, in bf16 and f16, with head sizes 16, 32 and 64 (one to
// four k-steps), 5 queries (a partial tile of each kind) and 70 (two query
// tiles of 64, the second of 6; two key tiles), causal and not, and reads
// the whole result against float64 attention of the same 16-bit values.
//
// Tolerance, per output element: the form rounds each weight p_j to the
// 16-bit type before P·V (unit roundoff u: 2^-8 bf16, 2^-11 f16), which
// moves the output by at most u·Σ_j p_j·|v_jd| / Σ_j p_j, and the output
// is rounded once more (u·|o|); f32's sums add 1e-6 of the row's largest.
// The log-sum-exp (f32 bits in two elements; read back for bf16): its
// scores are products of 16-bit values, exact in f32, summed in f32 over
// dh terms, so each is off by at most dh·2^-24·Σ_d|q_d·k_d| (times the
// scale), which moves the log-sum-exp by at most the largest of them;
// plus 1e-6 of it for the exponentials and the sum of the weights.
// Backward (the tensor-core form too, rounding ds and the weights to the
// 16-bit type for its products) as in TestAMPAttentionKernel, but with
// D_i = Σ dO·O taken from the output the forward stored: the gradient of
// w within 2^-8 of Σ|x·d|. Planted bugs (dv from ds, dk or dq without the
// scale, ds without D_i, the output not rescaled by the running maximum)
// each failed it.
func TestAttentionMMAForm(t *testing.T) {
	_, gpu := hostAndGPUForms(t)
	const b, heads = 2, 2
	for _, c := range []struct {
		typ    ir.DType
		u      float64
		T, dh  int
		causal bool
	}{
		{ir.BF16, 0x1p-8, 5, 16, false},
		{ir.BF16, 0x1p-8, 70, 16, true},
		{ir.BF16, 0x1p-8, 70, 32, false},
		{ir.F16, 0x1p-11, 70, 16, false},
		{ir.F16, 0x1p-11, 5, 32, true},
		// The gpt's head size: the largest fragments a lane holds in the
		// emulation (its fiber stack is 64 KB).
		{ir.BF16, 0x1p-8, 70, 64, true},
	} {
		t.Run(fmt.Sprintf("%s/T=%d/dh=%d/causal=%v", c.typ, c.T, c.dh, c.causal), func(t *testing.T) {
			T, dh, e := c.T, c.dh, heads*c.dh
			p, err := compiler.Compile(ampAttentionModelOf(c.typ, T, heads, dh, c.causal, 0), compiler.Options{Fuse: true})
			if err != nil {
				t.Fatal(err)
			}
			if src, _, err := codegen.Kernels(p); err != nil || !strings.Contains(src, "wmma::mma_sync") {
				t.Fatal("the program's attention has no tensor-core form")
			}
			rng := rand.New(rand.NewPCG(uint64(T), uint64(dh)))
			x := make([]float32, b*T*3*e)
			for i := range x {
				// Values of the 16-bit type, so that the cast is exact: 8
				// significant bits fit both types; f16's range holds them.
				x[i] = math.Float32frombits(math.Float32bits(float32(2*rng.NormFloat64())) &^ 0xffff)
			}
			s, got := ampAttentionPredict(t, gpu, p, x, b, 3*e)
			width := e + 2*heads
			if len(got) != b*T*width {
				t.Fatalf("result of %d values, want %d", len(got), b*T*width)
			}
			bad := 0
			for n := 0; n < b; n++ {
				for h := 0; h < heads; h++ {
					for i := 0; i < T; i++ {
						o, spread, lse, dotAbs := attentionSpread64(x, n, h, i, T, e, dh, c.causal)
						row := got[(n*T+i)*width:]
						big := 0.0
						for _, v := range o {
							big = math.Max(big, math.Abs(v))
						}
						for d, want := range o {
							tol := c.u*math.Abs(want) + c.u*spread[d] + 1e-6*big
							if g := row[h*dh+d]; math.Abs(g-want) > tol && bad < 10 {
								bad++
								t.Errorf("b %d head %d query %d: output[%d] %.9g, float64 %.9g (tolerance %.3g)", n, h, i, d, g, want, tol)
							}
						}
						if c.typ != ir.BF16 {
							// An f16 element widened to f32 does not keep
							// its bits in the high half; bf16's case reads
							// the same store (ngen_store_f32_bits).
							continue
						}
						hi := math.Float32bits(float32(row[e+2*h])) >> 16
						lo := math.Float32bits(float32(row[e+2*h+1])) >> 16
						tol := 1e-6*math.Abs(lse) + float64(dh)*0x1p-24*dotAbs
						if g := float64(math.Float32frombits(hi<<16 | lo)); math.Abs(g-lse) > tol && bad < 10 {
							bad++
							t.Errorf("b %d head %d query %d: log-sum-exp %.9g, float64 %.9g", n, h, i, g, lse)
						}
					}
				}
			}
			if err := s.Run("step", b); err != nil {
				t.Fatal(err)
			}
			dw := readNamed(t, s, "grad", "w")
			want, mag := make([]float64, 3*e), make([]float64, 3*e)
			for n := 0; n < b; n++ {
				for h := 0; h < heads; h++ {
					// D_i from the output the forward stored, which
					// backward reads: the weights' rounding (above) moves
					// it by up to u·Σ_d spread_d, more than the
					// gradient's tolerance allows.
					D := func(i int) float64 {
						dd := 0.0
						for d := 0; d < dh; d++ {
							dd += got[(n*T+i)*width+h*dh+d]
						}
						return dd
					}
					for k, g := range attentionGradD64(x, n, h, T, e, dh, c.causal, D) {
						xv := float64(x[n*T*3*e+k])
						want[k%(3*e)] += xv * g
						mag[k%(3*e)] += math.Abs(xv * g)
					}
				}
			}
			for k := range want {
				if math.Abs(dw[k]-want[k]) > mag[k]/256 {
					t.Errorf("grad w[%d] %.9g, float64 %.9g (Σ|x·d| %.3g)", k, dw[k], want[k], mag[k])
				}
			}
		})
	}
}

// attentionSpread64 is attention64 with, per output column d, Σ_j w_j·|v_jd|
// (w the softmax weights): the bound on what rounding the weights moves;
// and the largest scaled Σ_d|q_d·k_d| over the visible keys, which bounds
// the f32 sums' error in the scores.
func attentionSpread64(x []float32, n, h, i, T, e, dh int, causal bool) (o, spread []float64, lse, dotAbs float64) {
	o, lse = attention64(x, n, h, i, T, e, dh, causal)
	at := func(t, part, d int) float64 { return float64(x[(n*T+t)*3*e+part*e+h*dh+d]) }
	spread = make([]float64, dh)
	for j := 0; j < T && !(causal && j > i); j++ {
		dot, abs := 0.0, 0.0
		for d := 0; d < dh; d++ {
			dot += at(i, 0, d) * at(j, 1, d)
			abs += math.Abs(at(i, 0, d) * at(j, 1, d))
		}
		dotAbs = math.Max(dotAbs, abs/math.Sqrt(float64(dh)))
		w := math.Exp(dot/math.Sqrt(float64(dh)) - lse)
		for d := range spread {
			spread[d] += w * math.Abs(at(j, 2, d))
		}
	}
	return o, spread, lse, dotAbs
}
