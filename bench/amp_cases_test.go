package bench

import (
	"fmt"
	"testing"

	"github.com/ngen-ml/ngen/models/builds"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/data"
)

// ampCase is one model of the GPU mixed-precision benchmark (TestGPUAMP):
// its f32 package, which models/builds compiles in bf16 and fp16, one
// step's inputs, and torch_step.py's arguments for the same model.
type ampCase struct {
	pkg, describe string
	batch         int
	in            runtime.Inputs
	torch         []string
}

// ampCases are the seed MLP and ConvNet (batch 64, on Fashion-MNIST's
// first images) and the gpt and the TransformerLM (batch 16, random ids),
// at the shapes of the other benchmarks.
func ampCases(t *testing.T) []ampCase {
	ids := tokenIDs()
	images := func(c benchCase) runtime.Inputs {
		x, y := input(t, c)
		return runtime.Inputs{"x": x, "y": y}
	}
	vocab := fmt.Sprint(data.CharVocab)
	g, tr := gptPeer, transformerPeer
	return []ampCase{
		{"mlp", cases[1].describe, cases[1].batch, images(cases[1]), cases[1].peerArgs()},
		{"convnet", cases[2].describe, cases[2].batch, images(cases[2]), cases[2].peerArgs()},
		{"gpt", "causal char LM (d_model 256, 4 layers, 4 heads, T 128, batch 16, dropout 0.1, Adam)", g.batch,
			runtime.Inputs{"x": ids(g.batch * g.T), "y": ids(g.batch * g.T)},
			[]string{"--model", "gpt", "--vocab", vocab, "--seq", fmt.Sprint(g.T)}},
		{"transformer", "seed TransformerLM (d_model 256, 4 heads, 2+2 layers, src and tgt T 64, batch 16, dropout 0.1, Adam)", tr.batch,
			runtime.Inputs{"src": ids(tr.batch * tr.T), "tgt": ids(tr.batch * tr.T), "y": ids(tr.batch * tr.T)},
			[]string{"--model", "transformer", "--vocab", vocab, "--seq", fmt.Sprint(tr.T)}},
	}
}

// TestAMPCases checks, without a GPU, what TestGPUAMP feeds: each case's
// inputs are its f32 package's and its bf16 and fp16 builds' step inputs,
// by name and size at the case's batch, and torch_step.py takes its
// arguments with --amp (TestPeersRun runs the f32 ones).
func TestAMPCases(t *testing.T) {
	for _, c := range ampCases(t) {
		f32, err := runtime.Registered(c.pkg)
		if err != nil {
			t.Fatal(err)
		}
		plans := map[string]*runtime.Plan{"f32": f32.Plan}
		for _, amp := range []string{"bf16", "fp16"} {
			p, err := builds.Program(c.pkg, amp)
			if err != nil {
				t.Fatalf("%s %s: %v", c.pkg, amp, err)
			}
			plans[amp] = p.Plan
		}
		for typ, plan := range plans {
			var step *runtime.Func
			for i := range plan.Funcs {
				if plan.Funcs[i].Name == "step" {
					step = &plan.Funcs[i]
				}
			}
			if step == nil || len(step.Inputs) != len(c.in) {
				t.Fatalf("%s %s: step inputs %v, the case feeds %d", c.pkg, typ, step, len(c.in))
			}
			for _, in := range step.Inputs {
				v, ok := c.in[in.Name]
				if !ok {
					t.Fatalf("%s %s: the case feeds no %q", c.pkg, typ, in.Name)
				}
				n := 0
				switch v := v.(type) {
				case []float32:
					n = len(v)
				case []int32:
					n = len(v)
				}
				if want := plan.Buffers[in.Buf].Elems.Eval(map[string]int{"B": c.batch}); int64(n) != want {
					t.Errorf("%s %s: input %s has %d elements, the step takes %d at batch %d", c.pkg, typ, in.Name, n, want, c.batch)
				}
			}
		}
	}
}
