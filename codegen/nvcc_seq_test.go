package codegen

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/lstm"
	"github.com/ngen-ml/ngen/models/rnn"
)

// TestNVCCSequence compiles the kernels of the sequence models with nvcc
// for sm_80 and sm_90, every warning an error, at odd sizes: the masked
// tanh RNN with an initial state, a masked ReLU RNN, the LSTM generator
// from (h0, c0) and the language model; f32 fused and f64 unfused.
func TestNVCCSequence(t *testing.T) {
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		t.Skip("nvcc not on PATH: run the README's test command to install the CUDA toolkit")
	}
	reluRNN := func(dt dsl.DType) *dsl.Model {
		m := dsl.NewModel("relu_rnn")
		x := m.Tokens("x", dsl.Batch, 7)
		mask := m.Tokens("mask", dsl.Batch, 7)
		_, hn := m.RNN("rnn", m.Embedding("emb", x, 37, 11, dt), 13, dsl.Recurrent{BatchFirst: true, Nonlinearity: "relu", Mask: mask})
		logits := m.Linear("fc", dsl.Select(hn, 0, 0), 5)
		m.Output(logits)
		m.Loss(dsl.CrossEntropy(logits, m.Labels("y", dsl.Batch)))
		m.Optimizer(dsl.Adam{LR: 1e-3})
		return m
	}
	for _, c := range []struct {
		dt   dsl.DType
		fuse bool
	}{{dsl.F32, true}, {dsl.F64, false}} {
		for name, m := range map[string]*dsl.Model{
			"rnn":      rnn.Classifier("rnn", rnn.Sizes{Vocab: 37, Emb: 11, Hidden: 13, T: 7, Classes: 5, Layers: 2, InitialState: true, DType: c.dt}),
			"relu_rnn": reluRNN(c.dt),
			"lstm":     lstm.Generator("lstm", lstm.Sizes{Vocab: 37, Emb: 11, Hidden: 13, Layers: 2, T: 7, DType: c.dt}),
			"charlm":   lstm.LanguageModel("charlm", lstm.Sizes{Vocab: 37, Emb: 11, Hidden: 13, Layers: 2, T: 7, DType: c.dt}),
		} {
			t.Run(name+"_"+c.dt.String(), func(t *testing.T) {
				t.Parallel()
				irm, err := m.Build()
				if err != nil {
					t.Fatal(err)
				}
				p, err := compiler.Compile(irm, compiler.Options{Fuse: c.fuse})
				if err != nil {
					t.Fatal(err)
				}
				body, _, err := Kernels(p)
				if err != nil {
					t.Fatal(err)
				}
				dir := t.TempDir()
				cu := filepath.Join(dir, "k.cu")
				if err := os.WriteFile(cu, []byte(CUDA(p, body)), 0o644); err != nil {
					t.Fatal(err)
				}
				if out, err := nvccDevice(nvcc, cu, dir); err != nil || len(out) > 0 {
					t.Errorf("nvcc %s: %v\n%s", name, err, out)
				}
			})
		}
	}
}
