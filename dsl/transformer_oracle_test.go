package dsl_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/codegen/jit"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// The odd sizes: d_model 12, 3 heads, source length 5, target
// length 7, batch 2, feed-forward 20.
const (
	tfE, tfHeads, tfS, tfT, tfB, tfFF = 12, 3, 5, 7, 2, 20
	tfLR                              = 1e-2
)

type tfCase struct {
	module            string // encoder_layer, decoder_layer, transformer
	srcCausal, tgtKPM bool
	tgtCausal         bool
	normFirst         bool
	activation        string
}

// buildTF declares the module over inputs src [B,S,E], tgt [B,T,E], g (the
// upstream gradient, shaped as the output) and the key-padding mask of
// the source, with loss sum(out·g) and Adam.
func buildTF(c tfCase, dt dsl.DType) (*ir.Model, error) {
	m := dsl.NewModel("tf_" + c.module)
	src := m.Input("src", dt, dsl.Batch, tfS, tfE)
	tgt := m.Input("tgt", dt, dsl.Batch, tfT, tfE)
	kpm := m.Tokens("kpm", dsl.Batch, tfS)
	o := dsl.TransformerOptions{DimFeedforward: tfFF, Activation: c.activation, NormFirst: c.normFirst}
	var out *dsl.Tensor
	switch c.module {
	case "encoder_layer":
		out = m.TransformerEncoderLayer("layer", src, tfHeads, o, dsl.Masks{SrcCausal: c.srcCausal, SrcKeyPadding: kpm})
	case "decoder_layer":
		out = m.TransformerDecoderLayer("layer", tgt, src, tfHeads, o, dsl.Masks{TgtCausal: c.tgtCausal, MemoryKeyPadding: kpm})
	default:
		out = m.Transformer("", src, tgt, tfHeads, 2, 2, o, dsl.Masks{TgtCausal: c.tgtCausal, SrcKeyPadding: kpm, MemoryKeyPadding: kpm})
	}
	shape := []any{dsl.Batch, tfS, tfE}
	if c.module != "encoder_layer" {
		shape = []any{dsl.Batch, tfT, tfE}
	}
	g := m.Input("g", dt, shape...)
	m.Output(out)
	m.Loss(dsl.Sum(dsl.Mul(out, g), false))
	m.Optimizer(dsl.Adam{LR: tfLR})
	return m.Build()
}

type tfResult struct {
	Output []float64            `json:"output"`
	Loss   []float64            `json:"loss"`
	Grads  map[string][]float64 `json:"grads"`
	Params map[string][]float64 `json:"params"`
}

func runTorchTF(req map[string]any) (*tfResult, error) {
	var res tfResult
	return &res, oracle.RunScript("torch_transformer.py", req, &res)
}

func tensorJSON(shape []int, data []float64) map[string]any {
	return map[string]any{"shape": shape, "data": data}
}

// tfData draws the parameters (weights scaled by 1/√fan-in, LayerNorm
// weights near 1) and inputs.
func tfData(m *ir.Model, dt ir.DType) (params map[string][]float64, shapes map[string][]int, in map[string][]float64) {
	rng := rand.New(rand.NewPCG(11, 12))
	round := func(v float64) float64 {
		if dt == ir.F32 {
			return float64(float32(v))
		}
		return v
	}
	params, shapes, in = map[string][]float64{}, map[string][]int{}, map[string][]float64{}
	for _, v := range m.Forward.Values {
		switch v.Role {
		case ir.Param:
			var sh []int
			for _, d := range v.Shape {
				sh = append(sh, d.N)
			}
			n := int(v.Shape.Size().N)
			vals := make([]float64, n)
			for k := range vals {
				switch {
				case len(sh) == 2:
					vals[k] = rng.NormFloat64() / math.Sqrt(float64(sh[1]))
				case strings.Contains(v.Name, "norm") && strings.HasSuffix(v.Name, ".weight"):
					vals[k] = 1 + 0.1*rng.NormFloat64()
				default:
					vals[k] = 0.1 * rng.NormFloat64()
				}
				vals[k] = round(vals[k])
			}
			params[v.Name], shapes[v.Name] = vals, sh
		case ir.Input:
			if v.DType == ir.I32 {
				continue
			}
			n := tfB * v.Shape[1:].Size().N
			vals := make([]float64, n)
			for k := range vals {
				vals[k] = round(rng.NormFloat64())
			}
			in[v.Name] = vals
		}
	}
	return params, shapes, in
}

// torchName maps an ngen parameter name to the module's state_dict name.
func torchName(n string) string { return strings.TrimPrefix(n, "layer.") }

// TestTransformerOracle compares torch.nn.TransformerEncoderLayer,
// TransformerDecoderLayer and Transformer (2+2 layers) at odd sizes with
// their DSL declarations loaded with the same state_dict: the forward
// output, the loss of 3 Adam steps, every parameter gradient of step 1
// and every parameter after step 3, fused in f32 and f64 and unfused in
// f32. Masks: the source's key padding (batch 0 pads its last two
// positions), causal target (and, for the encoder layer, causal source).
func TestTransformerOracle(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	kpm := []int32{0, 0, 0, 1, 1, 0, 0, 0, 0, 0}
	cases := []tfCase{
		{module: "encoder_layer", srcCausal: true},
		{module: "encoder_layer", normFirst: true, activation: "gelu"},
		{module: "decoder_layer", tgtCausal: true},
		{module: "transformer", tgtCausal: true},
	}
	for _, c := range cases {
		runs := []struct {
			dt   ir.DType
			fuse bool
		}{{ir.F32, true}, {ir.F64, true}}
		if c.module == "transformer" {
			// The unfused plan (primitive attention and LayerNorm) once,
			// on the model that holds both layer kinds: g++ compiles
			// each plan, the longest part of this test.
			runs = append(runs, runs[0])
			runs[2].fuse = false
		}
		for _, run := range runs {
			name := fmt.Sprintf("%s_normfirst=%v/%s/fuse=%v", c.module, c.normFirst, run.dt, run.fuse)
			t.Run(name, func(t *testing.T) {
				m, err := buildTF(c, run.dt)
				if err != nil {
					t.Fatal(err)
				}
				params, shapes, in := tfData(m, run.dt)
				act := c.activation
				if act == "" {
					act = "relu"
				}
				req := map[string]any{"dtype": run.dt.String(), "module": c.module, "d_model": tfE, "nhead": tfHeads, "dim_ff": tfFF,
					"num_enc": 2, "num_dec": 2, "activation": act, "norm_first": c.normFirst,
					"src": tensorJSON([]int{tfB, tfS, tfE}, in["src"]), "tgt": tensorJSON([]int{tfB, tfT, tfE}, in["tgt"]),
					"src_causal": c.srcCausal, "tgt_causal": c.tgtCausal,
					"steps": 3, "lr": tfLR, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
				gShape := []int{tfB, tfT, tfE}
				if c.module == "encoder_layer" {
					gShape = []int{tfB, tfS, tfE}
				}
				req["g"] = tensorJSON(gShape, in["g"])
				mask := [][]int{{0, 0, 0, 1, 1}, {0, 0, 0, 0, 0}}
				req["src_kpm"], req["memory_kpm"] = mask, mask
				if c.module == "decoder_layer" {
					req["src_kpm"] = nil
				}
				if c.module == "encoder_layer" {
					req["memory_kpm"] = nil
				}
				tp := map[string]any{}
				for n, v := range params {
					tp[torchName(n)] = tensorJSON(shapes[n], v)
				}
				req["params"] = tp
				want, err := runTorchTF(req)
				if err != nil {
					t.Fatal(err)
				}

				p, err := compiler.Compile(m, compiler.Options{Fuse: run.fuse})
				if err != nil {
					t.Fatal(err)
				}
				s, err := jit.Session(dev, p, runtime.SessionOptions{MaxBatch: tfB, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				for n, v := range params {
					i, err := s.Lookup("param", n)
					if err != nil {
						t.Fatal(err)
					}
					if err := s.WriteFloats(i, v); err != nil {
						t.Fatal(err)
					}
				}
				write := func(name string, v []float64) {
					var err error
					if run.dt == ir.F32 {
						f := make([]float32, len(v))
						for k := range v {
							f[k] = float32(v[k])
						}
						err = s.WriteInput(name, f, tfB)
					} else {
						err = s.WriteInput(name, v, tfB)
					}
					if err != nil {
						t.Fatal(err)
					}
				}
				for n, v := range in {
					if _, err := s.Lookup("input", n); err == nil { // the encoder layer has no tgt
						write(n, v)
					}
				}
				if err := s.WriteInput("kpm", kpm, tfB); err != nil {
					t.Fatal(err)
				}
				read := func(role, name string) []float64 {
					i, err := s.Lookup(role, name)
					if err != nil {
						t.Fatal(err)
					}
					v, err := s.ReadFloats(i)
					if err != nil {
						t.Fatal(err)
					}
					return v
				}
				// f32: sums in another order than PyTorch's through a
				// few layers (GEMMs, softmax, LayerNorm): rtol 1e-4 with
				// atol 1e-5 for values near 0; f64 far tighter.
				rtol, atol := 1e-4, 1e-5
				if run.dt == ir.F64 {
					rtol, atol = 1e-9, 1e-11
				}
				if err := s.Run("predict", tfB); err != nil {
					t.Fatal(err)
				}
				check(t, "forward output", read("output", "output"), want.Output, rtol, atol)
				var names []string
				for n := range params {
					names = append(names, n)
				}
				sort.Strings(names)
				for step := 0; step < 3; step++ {
					if err := s.Run("step", tfB); err != nil {
						t.Fatal(err)
					}
					loss := read("output", "loss")[0]
					if math.Abs(loss-want.Loss[step]) > atol+rtol*math.Abs(want.Loss[step])*10 {
						t.Errorf("step %d loss %.9g, torch %.9g", step+1, loss, want.Loss[step])
					}
					if step == 0 {
						for _, n := range names {
							check(t, "grad "+n, read("grad", n), want.Grads[torchName(n)], rtol, atol)
						}
					}
				}
				for _, n := range names {
					got, w := read("param", n), want.Params[torchName(n)]
					if strings.HasSuffix(n, "in_proj_bias") {
						// The keys' bias adds q·b_k to every score of a
						// query, which the softmax ignores: its gradient is
						// 0 up to rounding, which Adam normalises to steps
						// of any sign. Compare the queries' and values'.
						got = append(append([]float64(nil), got[:tfE]...), got[2*tfE:]...)
						w = append(append([]float64(nil), w[:tfE]...), w[2*tfE:]...)
					}
					check(t, "param after 3 Adam steps "+n, got, w, rtol, atol)
				}
			})
		}
	}
}

func check(t *testing.T, what string, got, want []float64, rtol, atol float64) {
	t.Helper()
	if msg := oracle.Mismatch(got, want, rtol, atol); msg != "" {
		t.Errorf("%s: %s", what, msg)
	}
}
