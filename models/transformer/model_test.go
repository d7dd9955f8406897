package transformer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/codegen/jit"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/data"
)

// The tests compile small configurations of both models at run time
// (codegen/jit), so they need no generated package.

func small(c Config) Config {
	c.DModel, c.Heads, c.FF, c.SeqLen, c.MaxLen = 24, 3, 32, 9, 16
	c.EncLayers, c.DecLayers = 1, 2
	c.Name += "_small"
	return c
}

func session(t *testing.T, dev runtime.Device, m *dsl.Model, fuse bool, batch int) *runtime.Session {
	t.Helper()
	im, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	p, err := compiler.Compile(im, compiler.Options{Fuse: fuse})
	if err != nil {
		t.Fatal(err)
	}
	s, err := jit.Session(dev, p, runtime.SessionOptions{MaxBatch: batch, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// hostAndGPU opens two CPU devices, closed when t ends: one running the
// host's forms of the kernels, one the GPU's forms as written (warps of
// 32 lanes and their butterflies) under emulation, on gpuThreads threads.
func hostAndGPU(t *testing.T, gpuThreads int) (host, gpu runtime.Device) {
	t.Helper()
	h, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	g, err := cpu.New(cpu.Options{Threads: gpuThreads, GPUForms: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return h, g
}

func tokens(rng *rand.Rand, n int) []int32 { return tokensOf(rng, n, data.CharVocab) }

func read(t *testing.T, s *runtime.Session, role, name string) []float64 {
	t.Helper()
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

func within(got, want []float64, rtol, atol float64) string {
	for i := range want {
		if d := math.Abs(got[i] - want[i]); !(d <= atol+rtol*math.Abs(want[i])) {
			return fmt.Sprintf("[%d] %.9g vs %.9g", i, got[i], want[i])
		}
	}
	return ""
}

// TestFusedMatchesUnfused trains both models for 3 steps with dropout 0.1
// (on the embeddings, inside attention and after every sublayer), fused
// and unfused (-fuse=none: attention from batched GEMMs, the masked
// softmax and a dropout op, LayerNorm from reductions) from the same seed.
// The Philox masks are the same in both plans, so the two differ only by
// the order of floating-point sums: the loss of every step and every
// gradient of step 1 agree to f32 rounding.
func TestFusedMatchesUnfused(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const batch = 3
	for _, c := range []struct {
		name  string
		model func() *dsl.Model
		ins   []string
	}{
		{"transformer", func() *dsl.Model { return NewTransformerLM(small(LMConfig())) }, []string{"src", "tgt", "y"}},
		{"gpt", func() *dsl.Model { return NewGPT(small(GPTConfig())) }, []string{"x", "y"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			type run struct {
				loss  []float64
				grads map[string][]float64
			}
			var runs [2]run
			for k, fuse := range []bool{true, false} {
				s := session(t, dev, c.model(), fuse, batch)
				rng := rand.New(rand.NewPCG(5, 6))
				r := run{grads: map[string][]float64{}}
				for step := 0; step < 3; step++ {
					for _, in := range c.ins {
						if err := s.WriteInput(in, tokens(rng, batch*9), batch); err != nil {
							t.Fatal(err)
						}
					}
					if err := s.Run("step", batch); err != nil {
						t.Fatal(err)
					}
					r.loss = append(r.loss, read(t, s, "output", "loss")[0])
					if step == 0 {
						for _, n := range s.Names("grad") {
							r.grads[n] = read(t, s, "grad", n)
						}
					}
				}
				s.Close()
				runs[k] = r
			}
			// f32, sums in another order (flash attention's online
			// softmax, LayerNorm's shifted one-pass statistics): rtol 1e-4.
			if msg := within(runs[0].loss, runs[1].loss, 1e-4, 1e-6); msg != "" {
				t.Errorf("losses fused %v, unfused %v: %s", runs[0].loss, runs[1].loss, msg)
			}
			if len(runs[0].grads) == 0 || len(runs[0].grads) != len(runs[1].grads) {
				t.Fatalf("%d fused gradients, %d unfused", len(runs[0].grads), len(runs[1].grads))
			}
			for n, g := range runs[0].grads {
				if msg := within(g, runs[1].grads[n], 1e-3, 1e-5); msg != "" {
					t.Errorf("grad %s: fused vs unfused %s", n, msg)
				}
			}
		})
	}
}

// TestDropoutChangesLoss guards the test above against dropout silently
// off: the same model and data in eval mode gives another loss.
func TestDropoutChangesLoss(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	s := session(t, dev, NewGPT(small(GPTConfig())), true, 2)
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	x, y := tokens(rng, 18), tokens(rng, 18)
	loss := func(train bool) float64 {
		s.SetTrain(train)
		for _, in := range []struct {
			n string
			v []int32
		}{{"x", x}, {"y", y}} {
			if err := s.WriteInput(in.n, in.v, 2); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.RunGrads(2); err != nil {
			t.Fatal(err)
		}
		return read(t, s, "output", "loss")[0]
	}
	if a, b := loss(true), loss(false); a == b {
		t.Errorf("loss %v with dropout and without", a)
	}
}

// TestBadInput: a token id out of range is a run-time error naming the
// embedding and this package's model.go line, and the checked gradient
// phase (RunGrads, the generated Accumulate) leaves the model as it was,
// so the update never sees the batch (a plain Run("step") checks once at
// the end, after the update, to read the device once); a sequence longer
// than the positional table is an error at declaration naming the
// positional encoding and the line.
func TestBadInput(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	s := session(t, dev, NewGPT(small(GPTConfig())), true, 2)
	defer s.Close()
	before := map[string][]float64{}
	for _, n := range s.Names("param") {
		before[n] = read(t, s, "param", n)
	}
	x := tokens(rand.New(rand.NewPCG(1, 1)), 18)
	x[11] = data.CharVocab
	if err := s.WriteInput("x", x, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.WriteInput("y", x[:18:18], 2); err != nil {
		t.Fatal(err)
	}
	err = s.RunGrads(2)
	want := fmt.Sprintf("token id %d at position 11 is out of range [0,%d)", data.CharVocab, data.CharVocab)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "embedding (models/transformer/model.go:") {
		t.Errorf("step with a bad token: error %v, want embedding (models/transformer/model.go:N) ... %s", err, want)
	}
	if s.Pending() != 0 {
		t.Errorf("%d micro-batches pending after the failed one", s.Pending())
	}
	for n, v := range before {
		if msg := within(read(t, s, "param", n), v, 0, 0); msg != "" {
			t.Errorf("param %s changed by the failed step: %s", n, msg)
		}
	}

	c := small(GPTConfig())
	c.MaxLen = 8 // shorter than SeqLen 9
	_, err = NewGPT(c).Build()
	if err == nil || !strings.Contains(err.Error(), "positional_encoding (models/transformer/model.go:") || !strings.Contains(err.Error(), "longer than the table's 8 positions") {
		t.Errorf("sequence longer than the table: error %v", err)
	}
}

// TestPositionalTable: the pe buffer holds "Attention Is All You Need"'s
// table, pe[p, 2i] = sin(p / 10000^(2i/D)) and pe[p, 2i+1] = cos(...), as
// PyTorch's tutorial PositionalEncoding fills it, one table shared by the
// source and target encodings.
func TestPositionalTable(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	c := small(LMConfig())
	s := session(t, dev, NewTransformerLM(c), true, 1)
	defer s.Close()
	pe := read(t, s, "state", "pos_encoder.pe")
	if len(pe) != c.MaxLen*c.DModel {
		t.Fatalf("pe has %d values, want %d", len(pe), c.MaxLen*c.DModel)
	}
	for p := 0; p < c.MaxLen; p++ {
		for i := 0; i < c.DModel; i++ {
			a := float64(p) / math.Pow(10000, float64(i-i%2)/float64(c.DModel))
			want := math.Sin(a)
			if i%2 == 1 {
				want = math.Cos(a)
			}
			if got := pe[p*c.DModel+i]; math.Abs(got-want) > 1e-6 { // stored in f32
				t.Fatalf("pe[%d, %d] = %g, want %g", p, i, got, want)
			}
		}
	}
}

// TestEvalMode: in eval mode (the train flag off) both models predict as
// the same model declared without dropout, through predict and, where
// the plan derives it, predict_eval (which the generated Predict runs in
// eval mode): dropout inside attention and the fused residual LayerNorm
// reads the flag, the other dropouts are removed.
func TestEvalMode(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, c := range []struct {
		name  string
		model func(drop float64) *dsl.Model
		ins   []string
	}{
		{"transformer", func(p float64) *dsl.Model { c := small(LMConfig()); c.Dropout = p; return NewTransformerLM(c) }, []string{"src", "tgt"}},
		{"gpt", func(p float64) *dsl.Model { c := small(GPTConfig()); c.Dropout = p; return NewGPT(c) }, []string{"x"}},
	} {
		rng := rand.New(rand.NewPCG(9, 9))
		in := map[string][]int32{}
		for _, n := range c.ins {
			in[n] = tokens(rng, 2*9)
		}
		predict := func(s *runtime.Session, fn string) []float64 {
			for n, v := range in {
				if err := s.WriteInput(n, v, 2); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Run(fn, 2); err != nil {
				t.Fatal(err)
			}
			// Each function writes its own output buffer.
			for _, f := range s.Plan().Funcs {
				for _, o := range f.Outputs {
					if f.Name == fn && o.Name == "output" {
						v, err := s.ReadFloats(o.Buf)
						if err != nil {
							t.Fatal(err)
						}
						return v
					}
				}
			}
			t.Fatalf("%s has no output", fn)
			return nil
		}
		plain := session(t, dev, c.model(0), true, 2)
		want := predict(plain, "predict")
		plain.Close()
		s := session(t, dev, c.model(0.1), true, 2)
		s.SetTrain(false)
		fns := []string{"predict"}
		for _, f := range s.Plan().Funcs {
			if f.Name == "predict_eval" {
				fns = append(fns, f.Name)
			}
		}
		for _, fn := range fns {
			if msg := within(predict(s, fn), want, 0, 0); msg != "" {
				t.Errorf("%s %s in eval mode differs from the model without dropout: %s", c.name, fn, msg)
			}
		}
		s.SetTrain(true)
		if msg := within(predict(s, "predict"), want, 0, 0); msg == "" {
			t.Errorf("%s: predict in training mode equals the model without dropout", c.name)
		}
		s.Close()
	}
}
