package transformer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// Whole-model oracle sizes: odd enough that a transposed or mis-split
// dimension cannot pass (vocabulary 13, head width 4, feed-forward 24,
// T 7, batch 3), small enough for g++ and PyTorch in seconds.
const (
	orVocab, orB, orSteps = 13, 3, 3
	orLR                  = 1e-2
	// fullUpdateTol bounds, for the full-size gpt, the norm of the
	// difference of the two sides' parameter updates over 3 steps
	// relative to the norm of PyTorch's update (measured: at most 1.2e-3,
	// blocks.0.self_attn.out_proj.weight; most under 3e-4).
	fullUpdateTol = 5e-3
)

func oracleConfig(c Config, dt dsl.DType) Config {
	c.Vocab, c.DModel, c.Heads, c.FF, c.SeqLen, c.MaxLen = orVocab, 16, 4, 24, 7, 16
	c.EncLayers, c.DecLayers = 1, 2
	c.Dropout, c.LR, c.DType = 0, orLR, dt
	c.Name += "_oracle"
	return c
}

type lmResult struct {
	Logits []float64            `json:"logits"`
	Loss   []float64            `json:"loss"`
	Grads  map[string][]float64 `json:"grads"`
	Params map[string][]float64 `json:"params"`
}

func runTorchLM(req map[string]any) (*lmResult, error) {
	var res lmResult
	return &res, oracle.RunScript("torch_lm.py", req, &res)
}

// TestWholeModelOracle trains the GPT and the TransformerLM, declared by
// this package's NewGPT and NewTransformerLM (dropout 0), beside the very
// PyTorch modules cmd/train -torch trains them against
// (bench/torch_models.py), loaded with the same weights: the logits of the
// first forward pass, the cross-entropy of 3 Adam steps, every gradient
// of step 1 and every parameter after step 3. It covers what the layer
// oracle (dsl TestTransformerOracle) does not: the embedding and its √d
// scale, the positional table, the tied output projection (whose gradient
// sums the embedding's and the head's), the final LayerNorm, the mean
// cross-entropy over every position, and the parameter names, which must
// load into PyTorch's state_dict strictly. The gpt is also run at the size
// cmd/train trains (not with -short): its logits, losses and step-1
// gradients to the same f32 tolerances, its parameters' updates as wholes.
func TestWholeModelOracle(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	// torch.optim.AdamW with two parameter groups, as GPT recipes use
	// it: decay on the weight matrices, none on the biases, the
	// LayerNorms and the (tied) embedding.
	groups := dsl.AdamW{LR: orLR, WeightDecay: 0.1, Groups: []dsl.ParamGroup{
		{Kinds: []string{"*.bias", "layernorm.*"}, Names: []string{"tok_emb.*"}, NoWeightDecay: true},
	}}
	runs := []struct {
		model string
		dt    dsl.DType
		fuse  bool
		opt   dsl.Optimizer // nil: the model's Adam
		full  bool          // cmd/train's size (GPTConfig, dropout 0), batch 2
	}{
		// Each plan is a g++ compile of minutes on CI's machine, so not
		// every combination: the gpt in f32 (the kernels it trains with)
		// and f64 (where only a wrong formula can differ), the
		// TransformerLM in f64. Its f32 layer kernels are the layer
		// oracle's, fused equals unfused is TestFusedMatchesUnfused.
		{"gpt", dsl.F32, true, nil, false}, {"gpt", dsl.F64, true, nil, false}, {"transformer", dsl.F64, true, nil, false},
		{"gpt", dsl.F64, true, groups, false}, {"gpt", dsl.F32, true, groups, false},
		// The gpt at the size cmd/train trains (T 128, d_model 256, 4
		// blocks, the character vocabulary): the kernels' tiles, the
		// attention's blocks over 128 keys and the GEMMs' shapes are the
		// quality runs' (docs/PERF.md), not the small model's.
		{"gpt", dsl.F32, true, nil, true},
	}
	for _, r := range runs {
		name := fmt.Sprintf("%s/%s/fuse=%v", r.model, r.dt, r.fuse)
		if r.opt != nil {
			name += "/adamw_groups"
		}
		if r.full {
			name += "/full_size"
		}
		t.Run(name, func(t *testing.T) {
			var m *dsl.Model
			var c Config
			B := orB
			if r.model == "gpt" {
				c = oracleConfig(GPTConfig(), r.dt)
				if r.full {
					if testing.Short() {
						t.Skip("-short: the full-size gpt's compile")
					}
					c, B = GPTConfig(), 2
					c.Dropout, c.LR, c.Name = 0, orLR, "gpt_oracle_full"
				}
				c.Optimizer = r.opt
				m = NewGPT(c)
			} else {
				c = oracleConfig(LMConfig(), r.dt)
				m = NewTransformerLM(c)
			}
			s := session(t, dev, m, r.fuse, B)
			defer s.Close()
			T := c.SeqLen

			rng := rand.New(rand.NewPCG(21, 22))
			round := func(v float64) float64 {
				if r.dt == dsl.F32 {
					return float64(float32(v))
				}
				return v
			}
			im, err := m.Build()
			if err != nil {
				t.Fatal(err)
			}
			tp := map[string]any{}
			var names []string
			for _, p := range im.Forward.Values {
				if p.Role != ir.Param {
					continue
				}
				n := p.Name
				names = append(names, n)
				i, err := s.Lookup("param", n)
				if err != nil {
					t.Fatal(err)
				}
				var shape []int
				for _, d := range p.Shape {
					shape = append(shape, d.N)
				}
				v := make([]float64, p.Shape.Size().N)
				for k := range v {
					switch {
					case len(shape) == 2:
						v[k] = rng.NormFloat64() / math.Sqrt(float64(shape[1]))
					case strings.HasSuffix(n, ".weight"): // LayerNorm
						v[k] = 1 + 0.1*rng.NormFloat64()
					default:
						v[k] = 0.1 * rng.NormFloat64()
					}
					v[k] = round(v[k])
				}
				if err := s.WriteFloats(i, v); err != nil {
					t.Fatal(err)
				}
				tp[n] = map[string]any{"shape": shape, "data": v}
			}

			ids := func() []int32 { return tokensOf(rng, B*T, c.Vocab) }
			ins := map[string][]int32{}
			var x [][]int32
			if r.model == "gpt" {
				ins["x"], ins["y"] = ids(), ids()
				x = rows(ins["x"], T)
			} else {
				ins["src"], ins["tgt"], ins["y"] = ids(), ids(), ids()
				src, tgt := rows(ins["src"], T), rows(ins["tgt"], T)
				for b := range src {
					x = append(x, append(append([]int32(nil), src[b]...), tgt[b]...))
				}
			}
			for n, v := range ins {
				if err := s.WriteInput(n, v, B); err != nil {
					t.Fatal(err)
				}
			}
			req := map[string]any{"dtype": r.dt.String(), "model": r.model, "vocab": c.Vocab,
				"d_model": c.DModel, "nhead": c.Heads, "dim_ff": c.FF, "layers": c.DecLayers,
				"num_enc": c.EncLayers, "num_dec": c.DecLayers, "max_len": c.MaxLen,
				"x": x, "y": rows(ins["y"], T), "params": tp,
				"steps": orSteps, "lr": orLR, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
			if r.opt != nil {
				// The optimizer with its groups' members, as the plan
				// laid them out: torch builds its param_groups from them.
				o := *im.Optimizer
				o.Groups = slices.Clone(o.Groups)
				pg := s.Plan().Optimizer.Groups
				if len(pg) != 1 || pg[0].Params[0] != "tok_emb.weight" || len(pg[0].Params) < 2+4*c.DecLayers {
					t.Fatalf("groups %+v", pg)
				}
				for i, g := range pg {
					o.Groups[i].Params = g.Params
				}
				req["optimizer"] = o
			}
			want, err := runTorchLM(req)
			if err != nil {
				t.Fatal(err)
			}

			// f32: sums in another order than PyTorch's through the whole
			// model; f64 far tighter.
			rtol, atol := 2e-4, 2e-5
			if r.dt == dsl.F64 {
				rtol, atol = 1e-9, 1e-11
			}
			if err := s.Run("predict", B); err != nil {
				t.Fatal(err)
			}
			compare(t, "logits", read(t, s, "output", "output"), want.Logits, rtol, atol)
			for step := 0; step < orSteps; step++ {
				if err := s.Run("step", B); err != nil {
					t.Fatal(err)
				}
				loss := read(t, s, "output", "loss")[0]
				if math.Abs(loss-want.Loss[step]) > atol+rtol*math.Abs(want.Loss[step]) {
					t.Errorf("step %d loss %.9g, torch %.9g", step+1, loss, want.Loss[step])
				}
				if step == 0 {
					for _, n := range names {
						compare(t, "grad "+n, read(t, s, "grad", n), want.Grads[n], rtol, atol)
					}
				}
			}
			worst, worstName := 0.0, "" // full size: the largest relative update difference
			for _, n := range names {
				got, w := read(t, s, "param", n), want.Params[n]
				init := tp[n].(map[string]any)["data"].([]float64)
				if e := c.DModel; strings.HasSuffix(n, "in_proj_bias") && len(got) == 3*e && len(w) == 3*e {
					// The keys' bias adds q·b_k to every score of a query,
					// which the softmax ignores: its gradient is 0 up to
					// rounding, which Adam normalises to steps of any sign.
					got = append(append([]float64(nil), got[:e]...), got[2*e:]...)
					w = append(append([]float64(nil), w[:e]...), w[2*e:]...)
					init = append(append([]float64(nil), init[:e]...), init[2*e:]...)
				}
				if r.full {
					// At this size some gradients are below f32's
					// rounding of their sums (a few in a thousand), and
					// Adam turns those into steps of ±lr of either sign,
					// so element-wise agreement does not hold. What must
					// hold is the update as a whole: the two sides'
					// parameter changes differ by a small part of their
					// size (a wrong formula or a mis-tiled kernel moves
					// most of them).
					var dd, dw float64
					for k := range got {
						dd += (got[k] - w[k]) * (got[k] - w[k])
						dw += (w[k] - init[k]) * (w[k] - init[k])
					}
					rel := math.Sqrt(dd / dw)
					if !(rel <= fullUpdateTol) {
						t.Errorf("param %s after %d Adam steps: the updates differ by %.3g of their norm (at most %g)", n, orSteps, rel, fullUpdateTol)
					}
					if rel > worst {
						worst, worstName = rel, n
					}
					continue
				}
				compare(t, fmt.Sprintf("param after %d Adam steps %s", orSteps, n), got, w, rtol, atol)
			}
			if r.full {
				t.Logf("the parameters' updates differ by at most %.3g of their norm (%s)", worst, worstName)
			}
		})
	}
}

// tokensOf draws n token ids below vocab.
func tokensOf(rng *rand.Rand, n, vocab int) []int32 {
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(rng.IntN(vocab))
	}
	return x
}

func rows(x []int32, t int) [][]int32 {
	var r [][]int32
	for i := 0; i < len(x); i += t {
		r = append(r, x[i:i+t])
	}
	return r
}

func compare(t *testing.T, what string, got, want []float64, rtol, atol float64) {
	t.Helper()
	if msg := oracle.Mismatch(got, want, rtol, atol); msg != "" {
		t.Errorf("%s: %s", what, msg)
	}
}

// TestDropoutSites: the oracle above runs with dropout 0, so this checks
// that training mode drops where PyTorch's modules do, at their rate, each
// site on its own random stream. torch.nn.TransformerEncoderLayer (the
// gpt's blocks) drops the attention weights (MultiheadAttention's
// dropout), the attention's output (dropout1), the activation inside the
// feed-forward (dropout) and its output (dropout2); the decoder layer adds
// the cross-attention's weights and output (dropout2 of three); the
// models drop the embedded input once per PositionalEncoding call.
func TestDropoutSites(t *testing.T) {
	for _, c := range []struct {
		name     string
		model    *dsl.Model
		dropouts int // dropout ops
		attn     int // attention ops (each drops its weights)
		ffMid    int // dropouts of the feed-forward's activation
	}{
		// 1 embedding + 3 per block; 2 blocks.
		{"gpt", NewGPT(small(GPTConfig())), 1 + 3*2, 2, 2},
		// source and target embeddings + 3 per encoder layer (1) + 4 per
		// decoder layer (2).
		{"transformer", NewTransformerLM(small(LMConfig())), 2 + 3*1 + 4*2, 1 + 2*2, 1 + 2},
	} {
		im, err := c.model.Build()
		if err != nil {
			t.Fatal(err)
		}
		streams := map[int]bool{}
		var dropouts, attn, ffMid int
		for _, v := range im.Forward.Values {
			p := 0.0
			switch v.Op {
			case "dropout":
				dropouts, p = dropouts+1, v.Attrs.F
				if a := v.Args[0].Op; a == "gelu" || a == "relu" {
					ffMid++
				}
			case "attention":
				attn, p = attn+1, v.Attrs.F2
			default:
				continue
			}
			if p != 0.1 {
				t.Errorf("%s: %s drops with p %g, want 0.1", c.name, v.Op, p)
			}
			if streams[v.Attrs.I] {
				t.Errorf("%s: two dropout sites share random stream %d", c.name, v.Attrs.I)
			}
			streams[v.Attrs.I] = true
		}
		if dropouts != c.dropouts || attn != c.attn || ffMid != c.ffMid {
			t.Errorf("%s: %d dropouts (%d of the feed-forward's activation), %d attentions; want %d (%d), %d",
				c.name, dropouts, ffMid, attn, c.dropouts, c.ffMid, c.attn)
		}
	}
}
