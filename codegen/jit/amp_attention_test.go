package jit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestAMPAttentionKernel runs the fused attention forward on bf16 q, k
// and v (packed self-attention, 3 heads of 4, T 7, batch 2, causal and
// not, one-thread blocks and the GPU forms) and reads its whole result:
// each head's output must be the float64 attention of the same bf16
// values rounded once to bf16 (within one bf16 rounding, 2^-8 relative,
// plus f32's sums: 1e-6 of the row's largest), and the log-sum-exp, an
// f32 in two bf16 elements per head, within 1e-6 relative of float64's.
// The model's outputs and the loss leave in f32 (the result's widening
// keeps each element's bits), so the test reassembles the log-sum-exp's
// bits itself: a log-sum-exp kept only to bf16 precision fails here,
// where the whole-model oracles' tolerances let it pass. Backward, which
// reads the log-sum-exp back: the loss is the sum of the outputs, and
// the gradient of the parameter w (x·w is q, k and v; w = 1) is
// Σ x·(dq, dk, dv), against float64's (with D_i = Σ dO·O of the
// bf16-rounded output, which backward reads, as flash attention does)
// within 2^-8 of Σ |x·d| (each gradient element is one bf16 rounding of
// an f32 result, 2^-9: twice that). The scores are large
// (x ~ N(0, 4): log-sum-exps of about 10), so a log-sum-exp off by its
// low 16 bits (up to 2^-8 relative) would move the weights by percents.
func TestAMPAttentionKernel(t *testing.T) {
	const b, T, heads, dh = 2, 7, 3, 4
	const e = heads * dh
	host, gpu := hostAndGPUForms(t)
	rng := rand.New(rand.NewPCG(7, 8))
	x := make([]float32, b*T*3*e)
	for i := range x {
		// bf16 values, so that the cast to bf16 is exact.
		x[i] = math.Float32frombits(math.Float32bits(float32(2*rng.NormFloat64())) &^ 0xffff)
	}
	for _, causal := range []bool{false, true} {
		for _, dev := range []struct {
			name string
			d    runtime.Device
		}{{"host", host}, {"gpu forms", gpu}} {
			t.Run(fmt.Sprintf("causal=%v/%s", causal, dev.name), func(t *testing.T) {
				p, err := compiler.Compile(ampAttentionModel(T, heads, dh, causal, 0), compiler.Options{Fuse: true})
				if err != nil {
					t.Fatal(err)
				}
				s, got := ampAttentionPredict(t, dev.d, p, x, b, 3*e)
				if err := s.Run("step", b); err != nil {
					t.Fatal(err)
				}
				dw := readNamed(t, s, "grad", "w")
				want, mag := make([]float64, 3*e), make([]float64, 3*e)
				for n := 0; n < b; n++ {
					for h := 0; h < heads; h++ {
						dx := attentionGrad64(x, n, h, T, e, dh, causal)
						for k, g := range dx {
							c := k % (3 * e)
							xv := float64(x[n*T*3*e+k])
							want[c] += xv * g
							mag[c] += math.Abs(xv * g)
						}
					}
				}
				for c := range want {
					if math.Abs(dw[c]-want[c]) > mag[c]/256 {
						t.Errorf("grad w[%d] %.9g, float64 %.9g (Σ|x·d| %.3g)", c, dw[c], want[c], mag[c])
					}
				}
				width := e + 2*heads
				if len(got) != b*T*width {
					t.Fatalf("result of %d values, want %d: [B, T, H·dh + 2H]", len(got), b*T*width)
				}
				for n := 0; n < b; n++ {
					for h := 0; h < heads; h++ {
						for i := 0; i < T; i++ {
							o, lse := attention64(x, n, h, i, T, e, dh, causal)
							row := got[(n*T+i)*width:]
							big := 0.0
							for _, v := range o {
								big = math.Max(big, math.Abs(v))
							}
							for d, want := range o {
								// One bf16 rounding of the f32 result.
								if g := row[h*dh+d]; math.Abs(g-want) > math.Abs(want)/256+1e-6*big {
									t.Errorf("b %d head %d query %d: output[%d] %.9g, float64 %.9g", n, h, i, d, g, want)
								}
							}
							hi := math.Float32bits(float32(row[e+2*h])) >> 16
							lo := math.Float32bits(float32(row[e+2*h+1])) >> 16
							if g := float64(math.Float32frombits(hi<<16 | lo)); math.Abs(g-lse) > 1e-6*math.Abs(lse) {
								t.Errorf("b %d head %d query %d: log-sum-exp %.9g, float64 %.9g", n, h, i, g, lse)
							}
						}
					}
				}
			})
		}
	}
}

// ampAttentionPredict opens p (ampAttentionModel's) on dev at batch b,
// sets its parameter w (width elements) to 1, and runs predict on x; it
// returns the session, closed when the test ends, and the output.
func ampAttentionPredict(t *testing.T, dev runtime.Device, p *compiler.Program, x []float32, b, width int) (*runtime.Session, []float64) {
	t.Helper()
	s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: b, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	wi, err := s.Lookup("param", "w")
	if err != nil {
		t.Fatal(err)
	}
	ones := make([]float64, width)
	for i := range ones {
		ones[i] = 1
	}
	if err := s.WriteFloats(wi, ones); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteInput("x", x, b); err != nil {
		t.Fatal(err)
	}
	if err := s.Run("predict", b); err != nil {
		t.Fatal(err)
	}
	return s, readNamed(t, s, "output", "output")
}

// hostAndGPUForms opens the CPU device with its host forms and one that
// runs the GPU forms (two threads), closed when the test ends.
func hostAndGPUForms(t *testing.T) (host, gpu runtime.Device) {
	t.Helper()
	for i, o := range []cpu.Options{{}, {Threads: 2, GPUForms: true}} {
		d, err := cpu.New(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		if i == 0 {
			host = d
		} else {
			gpu = d
		}
	}
	return host, gpu
}

// ampAttentionModel is packed self-attention in bf16 over an input x
// [B, T, 3·heads·dh] times a parameter w (w = 1: the optimizer needs a
// parameter), dropout p on the weights; the loss is the sum of the
// outputs (the log-sum-exp's columns left out).
func ampAttentionModel(T, heads, dh int, causal bool, p float64) *ir.Model {
	return ampAttentionModelOf(ir.BF16, T, heads, dh, causal, p)
}

// ampAttentionModelOf is ampAttentionModel in the 16-bit type typ.
func ampAttentionModelOf(typ ir.DType, T, heads, dh int, causal bool, p float64) *ir.Model {
	e := heads * dh
	bld := irtest.New()
	in := bld.Input("x", ir.F32, ir.S("B"), ir.D(T), ir.D(3*e))
	w := bld.Param("w", ir.F32, 0.1, 3*e)
	xw := bld.Binary("mul", in, w)
	attrs := ir.Attrs{Ints: []int{heads, dh, 0, e, 2 * e}, F: 1 / math.Sqrt(float64(dh)), F2: p, I: 1}
	if causal {
		attrs.Str = "causal"
	}
	att := bld.Op("attention", attrs, xw, xw, xw)
	loss := bld.Op("sum", ir.Attrs{}, bld.Op("slice", ir.Attrs{Axes: []int{2}, Ints: []int{0, e}}, att))
	m := bld.Model("amp_attention", loss, att, ir.Optimizer{Kind: "sgd", LR: 0.1})
	m.Precision = &ir.Precision{Type: typ, Pos: bld.Pos}
	return m
}

// attention64 is head h's output and log-sum-exp for query i of sample n
// of packed self-attention over x [B, T, 3e], in float64.
func attention64(x []float32, n, h, i, T, e, dh int, causal bool) ([]float64, float64) {
	at := func(t, part, d int) float64 { return float64(x[(n*T+t)*3*e+part*e+h*dh+d]) }
	var s []float64
	mx := math.Inf(-1)
	for j := 0; j < T; j++ {
		if causal && j > i {
			break
		}
		dot := 0.0
		for d := 0; d < dh; d++ {
			dot += at(i, 0, d) * at(j, 1, d)
		}
		s = append(s, dot/math.Sqrt(float64(dh)))
		mx = math.Max(mx, s[j])
	}
	sum := 0.0
	for _, v := range s {
		sum += math.Exp(v - mx)
	}
	o := make([]float64, dh)
	for j, v := range s {
		p := math.Exp(v-mx) / sum
		for d := range o {
			o[d] += p * at(j, 2, d)
		}
	}
	return o, mx + math.Log(sum)
}

// attentionGrad64 is, in float64 but for D_i (above), the gradient of Σ (head h's outputs of sample n) with
// respect to x's [T, 3e] block of sample n: dq, dk and dv of head h in
// their columns, zero elsewhere.
func attentionGrad64(x []float32, n, h, T, e, dh int, causal bool) []float64 {
	return attentionGradD64(x, n, h, T, e, dh, causal, func(i int) float64 {
		// D_i = Σ dO·O with dO = 1, from the output as backward reads
		// it: rounded to bf16 (to nearest even).
		o, _ := attention64(x, n, h, i, T, e, dh, causal)
		dd := 0.0
		for _, v := range o {
			u := math.Float32bits(float32(v))
			u = (u + 0x7fff + (u>>16)&1) &^ 0xffff
			dd += float64(math.Float32frombits(u))
		}
		return dd
	})
}

// attentionGradD64 is attentionGrad64 with D_i = Σ dO·O (dO = 1) given.
func attentionGradD64(x []float32, n, h, T, e, dh int, causal bool, D func(i int) float64) []float64 {
	at := func(t, part, d int) float64 { return float64(x[(n*T+t)*3*e+part*e+h*dh+d]) }
	scale := 1 / math.Sqrt(float64(dh))
	dx := make([]float64, T*3*e)
	for i := 0; i < T; i++ {
		_, lse := attention64(x, n, h, i, T, e, dh, causal)
		dd := D(i)
		for j := 0; j < T && !(causal && j > i); j++ {
			dot, dp := 0.0, 0.0
			for d := 0; d < dh; d++ {
				dot += at(i, 0, d) * at(j, 1, d)
				dp += at(j, 2, d) // dO_i·v_j
			}
			p := math.Exp(dot*scale - lse)
			ds := p * (dp - dd)
			for d := 0; d < dh; d++ {
				dx[i*3*e+h*dh+d] += scale * ds * at(j, 1, d)   // dq_i
				dx[j*3*e+e+h*dh+d] += scale * ds * at(i, 0, d) // dk_j
				dx[j*3*e+2*e+h*dh+d] += p                      // dv_j: p·dO_i
			}
		}
	}
	return dx
}
