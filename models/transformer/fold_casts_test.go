package transformer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/codegen/jit"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/runtime"
)

// TestFoldCastsExact: under mixed precision the fused plan lets
// LayerNorm store its 16-bit output and read its 16-bit gradient itself
// (compiler's "fold norm casts" pass), and a bias's 16-bit gradient sum
// store f32 itself ("fold sum casts"), instead of launching a cast
// kernel for each. The conversion at the kernel's edge is the cast's, so
// 3 training steps (Adam, dropout on) of the gpt and the TransformerLM,
// in bf16 and f16, give the same losses and parameters bit for bit as
// the plan with both passes turned off (compiler.Options.Off), on the
// host's forms and on the GPU's under emulation, and the passes remove
// casts.
func TestFoldCastsExact(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles 16 modules")
	}
	small := func(c Config) Config {
		c.DModel, c.Heads, c.FF, c.SeqLen, c.MaxLen, c.EncLayers, c.DecLayers = 16, 2, 24, 7, 16, 1, 2
		return c
	}
	const batch, steps = 3, 3
	// The GPU forms on one thread: their atomics (the embedding's
	// gradient) add in the order the workers reach them, which two
	// threads vary.
	host, gpu := hostAndGPU(t, 1)
	for _, name := range []string{"gpt", "transformer"} {
		for _, h := range []dsl.DType{dsl.BF16, dsl.F16} {
			m := NewGPT(small(GPTConfig()))
			if name == "transformer" {
				m = NewTransformerLM(small(LMConfig()))
			}
			m.Precision(dsl.AMP{Type: h})
			im, err := m.Build()
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 8))
			ins := map[string][]int32{}
			for _, in := range im.Forward.Inputs() {
				ins[in.Name] = tokensOf(rng, batch*in.Shape[1].N, 11)
			}
			train := func(dev runtime.Device, off []string) (loss []float64, params map[string][]float64, launches int) {
				p, err := compiler.Compile(im, compiler.Options{Fuse: true, Off: off})
				if err != nil {
					t.Fatal(err)
				}
				for _, g := range p.Groups[p.Step] {
					if g.Kind != compiler.Gemm {
						launches++
					}
				}
				s, err := jit.Session(dev, p, runtime.SessionOptions{MaxBatch: batch, Seed: 3})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				for n, v := range ins {
					if err := s.WriteInput(n, v, batch); err != nil {
						t.Fatal(err)
					}
				}
				for range steps {
					if err := s.Run("step", batch); err != nil {
						t.Fatal(err)
					}
					loss = append(loss, read(t, s, "output", "loss")[0])
				}
				params = map[string][]float64{}
				for _, v := range im.Forward.Params() {
					params[v.Name] = read(t, s, "param", v.Name)
				}
				return loss, params, launches
			}
			for _, dev := range []struct {
				name string
				d    runtime.Device
			}{{"host forms", host}, {"GPU forms", gpu}} {
				loss, params, n := train(dev.d, nil)
				wantLoss, wantParams, wantN := train(dev.d, []string{"fold_norm_casts", "fold_sum_casts"})
				if n >= wantN {
					t.Errorf("%s %s: %d step kernels with the pass, %d without", name, h, n, wantN)
				}
				for i := range loss {
					if math.Float64bits(loss[i]) != math.Float64bits(wantLoss[i]) {
						t.Errorf("%s %s %s: step %d loss %v, without the pass %v", name, h, dev.name, i+1, loss[i], wantLoss[i])
					}
				}
				for pn, v := range params {
					for i := range v {
						if math.Float64bits(v[i]) != math.Float64bits(wantParams[pn][i]) {
							t.Errorf("%s %s %s: %s[%d] = %v, without the pass %v", name, h, dev.name, pn, i, v[i], wantParams[pn][i])
							break
						}
					}
				}
				t.Logf("%s %s %s: %d step kernels, %d without the pass; losses %v", name, h, dev.name, n, wantN, loss)
			}
		}
	}
}
