package codegen

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// transformerBlock is a small model that reaches every form of the
// LayerNorm, softmax and attention kernels: self-attention with causal
// and key-padding masks and dropout (one source for Q, K and V),
// cross-attention (separate query and key/value sources), LayerNorm
// forward and backward with the residual folded in (with and without
// dropout), and a standalone masked softmax.
func transformerBlock(dt ir.DType) *ir.Model {
	b := irtest.New()
	const e, t, s = 64, 9, 5
	x := b.Input("x", dt, ir.S("B"), ir.D(t), ir.D(e))
	mem := b.Input("mem", dt, ir.S("B"), ir.D(s), ir.D(e))
	kpm := b.Input("kpm", ir.I32, ir.S("B"), ir.D(s))
	p := func(name string, sh ...int) *ir.Value { return b.Param(name, dt, 0.1, sh...) }
	ln := func(name string, h *ir.Value) *ir.Value {
		return b.Op("layernorm", ir.Attrs{F: 1e-5}, h, p(name+".weight", e), p(name+".bias", e))
	}
	mha := func(name string, q, kv, pad *ir.Value, causal bool, drop float64) *ir.Value {
		return ops.MultiheadAttention(b.Builder, q, kv, kv, p(name+".in_proj_weight", 3*e, e), p(name+".in_proj_bias", 3*e),
			p(name+".out_proj.weight", e, e), p(name+".out_proj.bias", e), ops.MHAOptions{Heads: 2, Causal: causal, KeyPadding: pad, Dropout: drop, Stream: 1})
	}
	h := ln("ln1", b.Binary("add", x, mha("self_attn", x, x, nil, true, 0.1)))
	// A post-LN residual with dropout: the fused layernorm(h, b, r, γ, β).
	h = ln("ln2", b.Binary("add", h, b.Op("dropout", ir.Attrs{F: 0.1, I: 2}, mha("cross_attn", h, mem, kpm, false, 0))))
	sm := b.Op("softmax", ir.Attrs{Axes: []int{-1}, Str: "causal"}, b.Op("reshape", ir.Attrs{Shape: ir.Shape{ir.S("B"), ir.D(t), ir.D(8), ir.D(8)}}, h))
	m := b.Model("block", b.Op("mean", ir.Attrs{}, sm), h, ir.Optimizer{Kind: "sgd", LR: 0.1})
	if b.Err != nil {
		panic(b.Err)
	}
	return m
}

// TestNVCCTransformer compiles those kernels for sm_80 and sm_90, every
// warning an error, and with ptxas reporting register spills as warnings
// (so a spill fails too).
func TestNVCCTransformer(t *testing.T) {
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		t.Skip("nvcc not on PATH: run the README's test command to install the CUDA toolkit")
	}
	for _, dt := range []ir.DType{ir.F32, ir.F64} {
		t.Run(fmt.Sprint(dt), func(t *testing.T) {
			t.Parallel()
			p, err := compiler.Compile(transformerBlock(dt), compiler.Options{Fuse: true})
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
			if out, err := nvccDevice(nvcc, cu, dir, "-Xptxas=--warn-on-spills"); err != nil || len(out) > 0 {
				t.Errorf("nvcc %s: %v\n%s", dt, err, out)
			}
		})
	}
}
