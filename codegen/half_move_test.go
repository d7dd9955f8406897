package codegen

import (
	"regexp"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/dsl"
)

// TestHalfMovesCopyBits: under mixed precision a gather that only moves
// 16-bit elements (ops.Def.Moves: im2col, slice, its gradient, permute,
// concat) declares its value in the storage type and copies the bits, in
// the fused and the -fuse=none kernels: no widening to float, no
// ngen_round_* and no narrowing where it is stored (on the CPU the round
// trip made conv2's bf16 im2col 4× the f32 one). An f32 model keeps the
// float form. The value is exact either way, so the step computes the
// same bits (cmd/train's ConvNet bf16 epoch gave the same loss and
// accuracy before and after). nvcc compiles these forms in TestNVCC.
func TestHalfMovesCopyBits(t *testing.T) {
	conv := func(h ir.DType) func() *ir.Model {
		return func() *ir.Model {
			m := irtest.ConvNet(ir.F32, 5, irtest.Adam)
			if h != ir.F32 {
				m = amp(m, h)
			}
			return m
		}
	}
	for _, c := range []struct {
		name   string
		model  func() *ir.Model
		decl   string
		stored bool // every raw move is stored as it is (the ConvNet's im2col)
	}{
		{"convnet bf16", conv(ir.BF16), "__nv_bfloat16", true},
		{"convnet f16", conv(ir.F16), "__half", true},
		{"convnet f32", conv(ir.F32), "", false},
		{"gpt bf16", func() *ir.Model { return ampTransformer(t, "gpt", dsl.BF16) }, "__nv_bfloat16", false},
		{"transformer f16", func() *ir.Model { return ampTransformer(t, "transformer", dsl.F16) }, "__half", false},
	} {
		for _, fuse := range []bool{true, false} {
			p, err := compiler.Compile(c.model(), compiler.Options{Fuse: fuse})
			if err != nil {
				t.Fatal(err)
			}
			body, _, err := Kernels(p)
			if err != nil {
				t.Fatal(err)
			}
			src := CUDA(p, body)
			raw := regexp.MustCompile(`(?:const )?(__nv_bfloat16|__half) (v\d+)(?: = .*(?:in\d+\[|ngen_ld16\(in\d+, )|;)`).FindAllStringSubmatch(src, -1)
			if c.decl == "" {
				if len(raw) != 0 {
					t.Errorf("%s fuse=%v: a raw 16-bit move %q", c.name, fuse, raw[0][0])
				}
				continue
			}
			if len(raw) == 0 {
				t.Fatalf("%s fuse=%v: no gather copies %s bits", c.name, fuse, c.decl)
			}
			for _, r := range raw {
				if r[1] != c.decl {
					t.Errorf("%s fuse=%v: %q declares %s", c.name, fuse, r[0], r[1])
				}
				if regexp.MustCompile(`ngen_round_\w+\(` + r[2] + `\b`).MatchString(src) {
					t.Errorf("%s fuse=%v: %s is rounded again", c.name, fuse, r[2])
				}
				if c.stored && !regexp.MustCompile(`out\d+\[i\] = `+r[2]+`;`).MatchString(src) {
					t.Errorf("%s fuse=%v: %s is not stored as it is", c.name, fuse, r[2])
				}
			}
			t.Logf("%s fuse=%v: %d raw moves", c.name, fuse, len(raw))
		}
	}
}

// TestHalfPoolGradSelects: the seed ConvNet's 2×2 max pooling tiles its input,
// so its gradient moves each pixel's window gradient or zero
// (ops.Def.MovesIf) and, in 16 bits, copies the bits; the relu_bwd that
// reads it selects that 16-bit value or zero (ops.Def.Selects), so it is
// not rounded again, fused or not. An f32 model's kernels keep their
// float form.
func TestHalfPoolGradSelects(t *testing.T) {
	for _, h := range []ir.DType{ir.BF16, ir.F16} {
		for _, fuse := range []bool{true, false} {
			p, err := compiler.Compile(amp(irtest.SeedConvNet(1, 12, 9, 3, 5, 7, 4, false, irtest.Adam), h), compiler.Options{Fuse: fuse})
			if err != nil {
				t.Fatal(err)
			}
			body, _, err := Kernels(p)
			if err != nil {
				t.Fatal(err)
			}
			src := CUDA(p, body)
			st := h.StorageCType()
			if !regexp.MustCompile(`const ` + st + ` v\d+ = [^;]*\? v\d+_g : `).MatchString(src) {
				t.Errorf("%s fuse=%v: the pooling gradient does not copy %s bits", h, fuse, st)
			}
			if n := regexp.MustCompile(`ngen_relu_grad\(`).FindAllStringIndex(src, -1); len(n) == 0 {
				t.Fatalf("%s fuse=%v: no relu_bwd", h, fuse)
			}
			if regexp.MustCompile(`ngen_round_\w+\(ngen_relu_grad\(`).MatchString(src) {
				t.Errorf("%s fuse=%v: a relu_bwd of 16-bit values is rounded again", h, fuse)
			}
		}
	}
}
