package codegen

import (
	"regexp"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/dsl"
)

// TestHalfAttentionHostGEMMForm: a 16-bit attention's host form is the
// GEMM form, as f32's is (compiler/ops/attention_fast.go), in both
// Transformers, bf16 and f16: forward and backward widen each head into
// the f32 scratch and hand it to the library's sgemm, the forward stores
// the log-sum-exp's f32 bits in two elements, the backward reads them
// back; the GPU form stays the flash form. On the CPU the flash form
// took the gpt's bf16 attention 27 ms forward and 125 ms backward where
// f32's GEMM form takes 5.6 and 11 (cmd/train -profile). The arithmetic
// is checked in models/transformer's TestAMPOracle (the GPU forms
// against these) and TestAMPKeyPadding.
func TestHalfAttentionHostGEMMForm(t *testing.T) {
	for _, c := range []struct {
		model string
		h     dsl.DType
	}{{"gpt", dsl.BF16}, {"transformer", dsl.F16}} {
		p, err := compiler.Compile(ampTransformer(t, c.model, c.h), compiler.Options{Fuse: true})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Render(p)
		if err != nil {
			t.Fatal(err)
		}
		host := HostGlue(p, r, "model.cu", CUDA(p, r.CUDA), "ngen_cpu_entry")
		forms := regexp.MustCompile(`(?s)NGEN_HOST_FORM void (attention_(?:fwd|bwd)\w*__host)\(.*?\n}\n`).FindAllStringSubmatch(host, -1)
		var fwd, bwd int
		for _, f := range forms {
			body := f[0]
			if !strings.Contains(body, "::ngen_emu::gemm(") || !strings.Contains(body, "(float)in") {
				t.Errorf("%s %s: %s is not the GEMM form over widened heads:\n%s", c.model, c.h, f[1], body)
			}
			switch {
			case strings.Contains(f[1], "fwd"):
				fwd++
				if !strings.Contains(body, "ngen_store_f32_bits(") {
					t.Errorf("%s %s: %s does not store the log-sum-exp's f32 bits", c.model, c.h, f[1])
				}
			default:
				bwd++
				if !strings.Contains(body, "ngen_load_f32_bits(") {
					t.Errorf("%s %s: %s does not read the log-sum-exp's f32 bits", c.model, c.h, f[1])
				}
			}
		}
		if fwd == 0 || bwd == 0 {
			t.Errorf("%s %s: %d forward and %d backward attention host forms, want both", c.model, c.h, fwd, bwd)
		}
	}
}
