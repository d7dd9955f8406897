package ops

import (
	"fmt"
	"strings"
)

// Block-wide combinations for the row kernels (LayerNorm, softmax,
// attention): every thread of the block ends with the same total. Lanes
// combine by the preamble's butterfly (ngen_warp_sum, ngen_warp_max), warps
// through shared memory, and each thread adds the warp partials in the same
// order, so all of them hold the same bits. A one-thread block (the CPU
// backend's launch of a Loop kernel) already holds the total. Blocks are
// whole warps (the Loop kernels launch 128 threads).

// blockCombine renders the combination of vars (C lvalues) by op
// ("sum" or "max") through the shared array red, which the caller
// declares with blockRed for at least len(vars) values.
func (g *cg) blockCombine(red, op string, vars ...string) {
	n := len(vars)
	warp, comb := "ngen_warp_sum", func(a, b string) string { return a + " += " + b + ";" }
	if op == "max" {
		warp = "ngen_warp_max"
		comb = func(a, b string) string { return fmt.Sprintf("%s = %s > %s ? %s : %s;", a, b, a, b, a) }
	}
	g.f("if (blockDim.x > 1) {")
	for _, v := range vars {
		g.f("  %s = %s(%s);", v, warp, v)
	}
	var st []string
	for i, v := range vars {
		st = append(st, fmt.Sprintf("%s[(threadIdx.x >> 5) * %d + %d] = %s;", red, n, i, v))
	}
	g.f("  if ((threadIdx.x & 31) == 0) { %s }", strings.Join(st, " "))
	g.f("  __syncthreads();")
	for i, v := range vars {
		g.f("  %s = %s[%d];", v, red, i)
	}
	g.f("  for (int w = 1; w < (int)(blockDim.x >> 5); ++w) {")
	for i, v := range vars {
		g.f("    %s", comb(v, fmt.Sprintf("%s[w * %d + %d]", red, n, i)))
	}
	g.f("  }")
	g.f("  __syncthreads();")
	g.f("}")
}

// blockRed declares the shared array for n values per warp of a
// 1024-thread block.
func (g *cg) blockRed(t, red string, n int) {
	g.f("__shared__ %s %s[%d];", t, red, 32*n)
}
