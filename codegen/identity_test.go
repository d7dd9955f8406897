package codegen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/convnet"
	"github.com/ngen-ml/ngen/models/lstm"
	"github.com/ngen-ml/ngen/models/mlp"
	"github.com/ngen-ml/ngen/models/rnn"
	tf "github.com/ngen-ml/ngen/models/transformer"
	"github.com/ngen-ml/ngen/runtime"
)

// A kernel is its canonical body (STYLE.md §14): layers that compute alike
// launch one kernel, so the number of distinct kernels does not grow with
// depth.

// gpt2Small is a GPT-2-small-shaped decoder: 12 layers of d_model 768,
// 12 heads, feed-forward 3072, GPT-2's vocabulary and context, tied
// embedding.
func gpt2Small(layers int) tf.Config {
	c := tf.GPTConfig()
	c.Name = "gpt2_small"
	c.Vocab, c.DModel, c.Heads, c.FF, c.SeqLen, c.MaxLen, c.DecLayers = 50257, 768, 12, 3072, 1024, 1024, layers
	return c
}

func renderDSL(t *testing.T, m *dsl.Model, fuse bool) *Rendered {
	t.Helper()
	im, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	p, err := compiler.Compile(im, compiler.Options{Fuse: fuse, RefBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	r, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDistinctKernelsFlatInDepth: the seed GPT and a GPT-2-small-shaped
// one have as many distinct kernels at 12 layers as at 2 and 4, fused and
// unfused, while their launches grow with the layers and keep their
// layers' labels.
func TestDistinctKernelsFlatInDepth(t *testing.T) {
	for _, shape := range []struct {
		name string
		cfg  func(layers int) tf.Config
	}{
		{"gpt", func(l int) tf.Config { c := tf.GPTConfig(); c.DecLayers = l; return c }},
		{"gpt2_small", gpt2Small},
	} {
		for _, fuse := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fuse=%v", shape.name, fuse), func(t *testing.T) {
				var kernels, launches []int
				for _, layers := range []int{2, 4, 12} {
					r := renderDSL(t, tf.NewGPT(shape.cfg(layers)), fuse)
					n, labels := 0, map[string]bool{}
					for _, st := range r.Plan.Funcs[0].Steps {
						if st.Kind == runtime.LaunchStep {
							n++
							labels[st.Label] = true
						}
					}
					kernels, launches = append(kernels, len(r.Plan.Kernels)), append(launches, n)
					last := fmt.Sprintf("blocks_%d_", layers-1)
					found := false
					for l := range labels {
						found = found || strings.HasPrefix(l, last)
					}
					if !found {
						t.Errorf("%d layers: no launch labelled for layer %d (%s…)", layers, layers-1, last)
					}
				}
				if kernels[0] != kernels[1] || kernels[1] != kernels[2] {
					t.Errorf("distinct kernels at 2, 4, 12 layers: %v, want one number", kernels)
				}
				if !(launches[0] < launches[1] && launches[1] < launches[2]) {
					t.Errorf("launches per step at 2, 4, 12 layers: %v, want them to grow", launches)
				}
				t.Logf("distinct kernels %v, launches per training step %v at 2, 4, 12 layers", kernels, launches)
			})
		}
	}
}

// TestSharedKernelsTakeTheirArguments: launches that share a kernel pass
// their own buffers and constants (a dropout's Philox stream differs from
// layer to layer), never the first launch's.
func TestSharedKernelsTakeTheirArguments(t *testing.T) {
	r := renderDSL(t, tf.GPT(), true)
	type use struct {
		args  string
		label string
	}
	uses := map[int][]use{}
	for _, st := range r.Plan.Funcs[0].Steps {
		if st.Kind == runtime.LaunchStep {
			uses[st.Kernel] = append(uses[st.Kernel], use{fmt.Sprint(st.Args), st.Label})
		}
	}
	shared, streams := 0, 0
	for k, us := range uses {
		if len(us) < 2 {
			continue
		}
		shared++
		seen := map[string]string{}
		for _, u := range us {
			if o, dup := seen[u.args]; dup {
				t.Errorf("kernel %s: launches %s and %s pass the same arguments", r.Plan.Kernels[k].Name, o, u.label)
			}
			seen[u.args] = u.label
		}
		consts := map[int64]bool{}
		for _, st := range r.Plan.Funcs[0].Steps {
			if st.Kind == runtime.LaunchStep && st.Kernel == k {
				for _, a := range st.Args {
					if a.Buf < 0 && a.Scalar == "" {
						consts[a.Const] = true
					}
				}
			}
		}
		if len(consts) > 1 {
			streams++
		}
	}
	if shared == 0 || streams == 0 {
		t.Fatalf("%d shared kernels, %d of them with per-launch constants; want some of each", shared, streams)
	}
}

// TestCUDATargetIsGPUCode: the .cu of every seed model holds GPU code only
// (the host target's forms live in the host glue), and the kernels with a
// host form of their own say so, and how they run, in their KernelInfo.
func TestCUDATargetIsGPUCode(t *testing.T) {
	models := map[string]*dsl.Model{"mlp": mlp.MLP(), "convnet": convnet.ConvNet(), "convnet_bn": convnet.ConvNetBN(),
		"rnn": rnn.RNN(), "lstm": lstm.CharLM(), "gpt": tf.GPT(), "transformer": tf.TransformerLM()}
	hostForms := map[string]int{}
	for name, m := range models {
		for _, fuse := range []bool{true, false} {
			r := renderDSL(t, m, fuse)
			for _, bad := range []string{"NGEN_EMU", "ngen_emu", "getenv", "__builtin_cpu", "gemm(", "NGEN_HOST_FORM"} {
				if strings.Contains(r.CUDA, bad) {
					t.Errorf("%s (fuse %v): the .cu contains %q", name, fuse, bad)
				}
			}
			for _, ki := range r.Plan.Kernels {
				if ki.Host == nil {
					continue
				}
				hostForms[name]++
				if !strings.Contains(r.Host, "NGEN_HOST_FORM void "+ki.Name+ki.Host.Suffix+"(") {
					t.Errorf("%s: kernel %s: its host form %s%s is not in the host glue", name, ki.Name, ki.Name, ki.Host.Suffix)
				}
				gemm := strings.Contains(ki.Name, "rnn_scan") || strings.HasPrefix(ki.Name, "attention")
				if gemm && (!ki.Host.OwnStack() || !ki.SoloBlocks) {
					t.Errorf("%s: kernel %s calls the GEMM library in its host form but runs %v (one-thread blocks %v)", name, ki.Name, ki.Host.Run, ki.SoloBlocks)
				}
			}
		}
	}
	for _, name := range []string{"rnn", "lstm", "gpt", "transformer"} {
		if hostForms[name] == 0 {
			t.Errorf("%s: no kernel has a host form (recurrences, attention, LayerNorm, cross-entropy)", name)
		}
	}
}
