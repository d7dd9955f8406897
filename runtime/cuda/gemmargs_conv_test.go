package cuda

import (
	"fmt"
	"testing"

	"github.com/ngen-ml/ngen/codegen/jit"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/transformer"
	"github.com/ngen-ml/ngen/runtime"
)

// TestCublasArgsConvAMP: every GEMM of a convolution under mixed
// precision, as the plan issues it at an odd batch (the seed ConvNet
// with batch norm, and irtest.ConvNet's grouped, dilated and strided
// convolutions; fused and -fuse=none; bf16 and f16), lowers to calls
// the GPU backend makes (runtime.LowerGemm: one GEMM or one
// strided-batched GEMM, never the scratch+reduce it refuses for 16-bit
// types), and each call maps to cuBLAS as its f32 counterpart does
// (TestCublasArgsHalf's check), which the column-major reference then
// runs against the row-major one.
func TestCublasArgsConvAMP(t *testing.T) {
	checkAMPGemms(t, map[string]func() *ir.Model{
		"seed convnet_bn": func() *ir.Model { return irtest.SeedConvNet(1, 11, 9, 3, 5, 7, 4, true, irtest.Adam) },
		"irtest convnet":  func() *ir.Model { return irtest.ConvNet(ir.F32, 5, irtest.Adam) },
	}, nil)
}

// TestCublasArgsLinearAMP: the same for the Transformers, whose Linear
// layers over [B, T, ·] activations sum their weight gradients over the
// batch in the GEMM (compiler's batchSum, fused and -fuse=none alike):
// each such 16-bit GEMM must be one larger product ("k-concat", rounded
// once), and the plans must issue some.
func TestCublasArgsLinearAMP(t *testing.T) {
	small := func(c transformer.Config) transformer.Config {
		c.DModel, c.Heads, c.FF, c.SeqLen, c.MaxLen = 16, 2, 24, 5, 8
		c.EncLayers, c.DecLayers = 1, 2
		return c
	}
	build := func(m *dsl.Model) *ir.Model {
		im, err := m.Build()
		if err != nil {
			t.Fatal(err)
		}
		return im
	}
	checkAMPGemms(t, map[string]func() *ir.Model{
		"gpt":           func() *ir.Model { return build(transformer.NewGPT(small(transformer.GPTConfig()))) },
		"transformerlm": func() *ir.Model { return build(transformer.NewTransformerLM(small(transformer.LMConfig()))) },
	}, func(t *testing.T, name string, hows map[string]int) {
		if hows["k-concat"] == 0 {
			t.Errorf("%s: no weight gradient summed in one k-concat GEMM (%v)", name, hows)
		}
	})
}

// checkAMPGemms compiles each model in bf16 and f16, fused and
// -fuse=none, and checks every GEMM step of its plan as
// TestCublasArgsConvAMP says; then, when set, check sees how they were
// lowered (runtime.GemmCalls.How, counted).
func checkAMPGemms(t *testing.T, models map[string]func() *ir.Model, check func(t *testing.T, name string, hows map[string]int)) {
	for name, model := range models {
		for _, h := range []ir.DType{ir.BF16, ir.F16} {
			for _, fuse := range []bool{true, false} {
				m := model()
				m.Precision = &ir.Precision{Type: h}
				p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
				if err != nil {
					t.Fatal(err)
				}
				_, plan, err := jit.Build(p)
				if err != nil {
					t.Fatal(err)
				}
				hows := map[string]int{}
				for _, f := range plan.Funcs {
					for _, st := range f.Steps {
						if st.Kind != runtime.GemmStep {
							continue
						}
						g := st.Gemm.ArgsFor(map[string]int{"B": 3}, plan.Buffers, nil)
						if g.DType.Size() != 2 {
							t.Errorf("%s %s fuse=%v: a %s GEMM", name, h, fuse, g.DType)
							continue
						}
						layOut(&g)
						lo := runtime.LowerGemm(g, 0, 0)
						hows[lo.How]++
						if lo.Scratch > 0 || lo.How == "loop" {
							t.Errorf("%s %s fuse=%v: %dx%dx%d batch %d lowers to %s", name, h, fuse, g.M, g.N, g.K, g.Batch, lo.How)
							continue
						}
						for _, c := range lo.Calls {
							call, err := cublasArgs(c)
							if err != nil {
								t.Fatal(err)
							}
							// A weight gradient's C is f32 already
							// (compiler/f32_weight_grads.go).
							c32 := c
							c32.DType, c32.F32Out, c32.A, c32.B, c32.C = runtime.F32, false, widen(c.A), widen(c.B), widen(c.C)
							if c.F32Out {
								c32.C = c.C
							}
							call32, err := cublasArgs(c32)
							if err != nil {
								t.Fatal(err)
							}
							same := call
							same.DType, same.F32Out, same.A, same.B, same.C = runtime.F32, false, widen(call.A), widen(call.B), widen(call.C)
							if call.F32Out {
								same.C = call.C
							}
							if same != call32 {
								t.Fatalf("%s %s: call %+v, want the f32 case's %+v", name, h, call, call32)
							}
							runCublasArgsCase[float32](t, c32, 0)
						}
					}
				}
				t.Logf("%s %s fuse=%v: GEMMs lowered %v", name, h, fuse, hows)
				if check != nil {
					check(t, fmt.Sprintf("%s %s fuse=%v", name, h, fuse), hows)
				}
			}
		}
	}
}

// layOut gives g's operands fake addresses one after another, as
// gemmCases lays them out.
func layOut(g *runtime.GemmArgs) {
	rowsA, rowsB := g.M, g.K
	if g.TransA {
		rowsA = g.K
	}
	if g.TransB {
		rowsB = g.N
	}
	n := max(g.Batch, 1) - 1
	es := runtime.Ptr(g.DType.Size())
	g.A = fakeBase
	g.B = g.A + runtime.Ptr(g.StrideA*n+rowsA*g.LDA+1)*es
	g.C = g.B + runtime.Ptr(g.StrideB*n+rowsB*g.LDB+1)*es
}
