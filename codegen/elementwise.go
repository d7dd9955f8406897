package codegen

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler"
)

// elementwiseKernel renders a fused elementwise group: one grid-stride
// loop over the group's space that loads each input once (broadcast as its
// shape requires), computes every member in registers and stores only the
// members used outside the kernel.
func elementwiseKernel(p *compiler.Program, g *compiler.Group) *kernel {
	k := newKernel(p, g)
	in, out := k.buffers(p, g)
	w := &k.body
	fmt.Fprintf(w, "  const long long n = %s;\n", k.size(g.Space))
	w.WriteString("  NGEN_GRID_STRIDE(i, n) {\n")
	k.gridStride = true
	e := k.elementwise(p, g, in, "i", "    ", w)
	for _, v := range g.Outputs {
		fmt.Fprintf(w, "    %s[i] = %s;\n", out[v], e[v])
	}
	w.WriteString("  }\n")
	k.grid = gridFor(g.Space, k.block[0])
	return k
}
