package codegen

import (
	"regexp"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

// TestHalfIm2colCopiesBits: under mixed precision an im2col of a 16-bit
// input (ops.Def.Moves) declares its value in the storage type and
// copies the bits, in the fused and the -fuse=none kernels: no widening
// to float, no ngen_round_* and no narrowing on the store (on the CPU the
// round trip made conv2's bf16 im2col 4× the f32 one). An f32 model keeps
// the float form. The value is exact either way, so the step computes
// the same bits (cmd/train's ConvNet bf16 epoch gave the same loss and
// accuracy before and after).
func TestHalfIm2colCopiesBits(t *testing.T) {
	for _, c := range []struct {
		h    ir.DType
		decl string
	}{{ir.BF16, "__nv_bfloat16"}, {ir.F16, "__half"}, {ir.F32, ""}} {
		for _, fuse := range []bool{true, false} {
			m := irtest.ConvNet(ir.F32, 5, irtest.Adam)
			if c.h != ir.F32 {
				m = amp(m, c.h)
			}
			p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
			if err != nil {
				t.Fatal(err)
			}
			body, _, err := Kernels(p)
			if err != nil {
				t.Fatal(err)
			}
			src := CUDA(p, body)
			raw := regexp.MustCompile(`const (__nv_bfloat16|__half) (v\d+) = .*in\d+\[`).FindAllStringSubmatch(src, -1)
			if c.h == ir.F32 {
				if len(raw) != 0 {
					t.Errorf("f32 fuse=%v: a raw 16-bit move %q", fuse, raw[0][0])
				}
				continue
			}
			if len(raw) == 0 {
				t.Fatalf("%s fuse=%v: no im2col copies %s bits", c.h, fuse, c.decl)
			}
			for _, r := range raw {
				if r[1] != c.decl {
					t.Errorf("%s fuse=%v: %q declares %s", c.h, fuse, r[0], r[1])
				}
				if regexp.MustCompile(`ngen_round_\w+\(` + r[2] + `\b`).MatchString(src) {
					t.Errorf("%s fuse=%v: %s is rounded again", c.h, fuse, r[2])
				}
				if !regexp.MustCompile(`out\d+\[i\] = ` + r[2] + `;`).MatchString(src) {
					t.Errorf("%s fuse=%v: %s is not stored as it is", c.h, fuse, r[2])
				}
			}
		}
	}
}
