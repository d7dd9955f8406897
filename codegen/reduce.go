package codegen

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// reduceKernel renders a reduction over any axes with its fused
// elementwise prologue. Each input element is visited once, so prologue
// values used elsewhere (the activation gradient next to the bias
// gradient) are stored in the same pass. Two strategies:
//   - the innermost axis is kept: a thread per output element, or per
//     reduceVec adjacent ones, walks the reduced axes (reads stay
//     coalesced across threads; no barriers);
//   - the innermost axis is reduced: a block per output element, threads
//     stride over it and combine by warp shuffles and shared memory.
func reduceKernel(p *compiler.Program, g *compiler.Group, target ops.Target) *kernel {
	k := newKernel(p, g, target)
	in, out := k.buffers(p, g)
	r := g.Root
	space, axes := mergeAxes(g.Space, r.Attrs.Axes)
	red := map[int]bool{}
	var kept, reduced ir.Shape
	for i, d := range space {
		if contains(axes, i) {
			red[i] = true
			reduced = append(reduced, d)
		} else {
			kept = append(kept, d)
		}
	}
	// An input constant along the reduced axes (a per-channel statistic
	// or parameter) is indexed by the kept index o, which the inner loops
	// do not change.
	norm, _ := ir.NormAxes(r.Attrs.Axes, len(g.Space))
	var keptOrig ir.Shape
	var keptPos []int
	for i, d := range g.Space {
		if !contains(norm, i) {
			keptOrig, keptPos = append(keptOrig, d), append(keptPos, i)
		}
	}
	k.keptIndex = func(in ir.Shape) (string, bool) {
		if len(in) > len(g.Space) {
			return "", false
		}
		pad := padTo(in, len(g.Space))
		for _, ax := range norm {
			if pad[ax] != ir.D(1) {
				return "", false
			}
		}
		var inKept ir.Shape
		for _, i := range keptPos {
			inKept = append(inKept, pad[i])
		}
		return k.bcastIndex(keptOrig, inKept, "o"), true
	}
	t := r.DType.CType()
	// at is the accumulators' type: t, but in the forms that the CPU
	// backend runs with one-thread blocks (SoloBlocks), wide. There one
	// thread sums a whole output's range in order, and an f32 sum's
	// rounding error grows with its length where a GPU's threads and
	// shuffle tree keep it small. Batch norm's variance, E[d²] - E[d]²,
	// cancels that error into the gradients of the layers below (fuzz
	// seed 1164: 11 ulps in E[d²] over 175 values left a conv weight
	// gradient 9% off PyTorch's and the GPU forms'), so those host forms
	// sum f32 in double, as PyTorch's CPU batch norm does (its
	// acc_type<float> is double). A max is exact in either type. The
	// per-thread forms sum in order on a GPU too and keep t.
	at, wide := t, t
	if target != ops.CUDA && r.DType == ir.F32 && r.Attrs.Str == "" {
		wide = "double"
	}
	// Every reduction of the group (siblings over the same space and axes
	// share the pass): its accumulator, start value, combine and shuffle.
	type acc struct {
		v                      *ir.Value
		name, init, comb, warp string
	}
	var accs []acc
	for _, v := range g.Values {
		if kindOf(v) != ops.Reduce {
			continue
		}
		a := acc{v: v, name: fmt.Sprintf("acc%d", len(accs)), init: k.ctx(t, "").Lit(0), warp: "ngen_warp_sum"}
		a.comb = a.name + " + x"
		if v.Op == "max" {
			a.init, a.comb, a.warp = "-NGEN_INF", k.ctx(t, "").Math("fmax")+"("+a.name+", x)", "ngen_warp_max"
		}
		accs = append(accs, a)
	}
	isRoot := map[*ir.Value]bool{}
	for _, a := range accs {
		isRoot[a.v] = true
	}
	w := &k.body
	fmt.Fprintf(w, "  const long long nout = %s;\n", k.size(kept))
	fmt.Fprintf(w, "  const long long nred = %s;\n", k.size(reduced))
	// offset of a kept / reduced linear index into the input.
	offset := func(dims []int, idx string) string {
		var terms []string
		rem := "(unsigned long long)(" + idx + ")" // non-negative: unsigned division is cheaper
		for j := len(dims) - 1; j >= 0; j-- {
			d := dims[j]
			coord := fmt.Sprintf("((%s) %% %s)", rem, k.dim(space[d]))
			if j == 0 {
				coord = "(" + rem + ")"
			}
			stride := space[d+1:]
			if len(stride) == 0 {
				terms = append(terms, coord)
			} else {
				terms = append(terms, fmt.Sprintf("%s * (%s)", coord, k.size(stride)))
			}
			rem = fmt.Sprintf("(%s) / %s", rem, k.dim(space[d]))
		}
		if len(terms) == 0 {
			return "0"
		}
		return "(long long)(" + strings.Join(terms, " + ") + ")"
	}
	var keptAxes, redAxes []int
	for i := range space {
		if red[i] {
			redAxes = append(redAxes, i)
		} else {
			keptAxes = append(keptAxes, i)
		}
	}
	body := func(indent, index string, accs []acc) {
		fmt.Fprintf(w, "%sconst long long i = %s;\n", indent, index)
		var b stmts
		e := k.elementwise(p, g, in, "i", indent, &b)
		var xs []string
		for _, a := range accs {
			xs = append(xs, k.operand(g, a.v.Args[0], in, e, "i", indent, &b))
		}
		b.writeTo(w)
		for _, v := range g.Outputs {
			if !isRoot[v] {
				fmt.Fprintf(w, "%s%s[i] = %s;\n", indent, out[v], k.stored(v, e))
			}
		}
		for j, a := range accs {
			fmt.Fprintf(w, "%s{ const %s x = %s; %s = %s; }\n", indent, at, xs[j], a.name, a.comb)
		}
	}
	finish := func(a acc) string {
		if h := a.v.Attrs.Str; h != "" {
			// A 16-bit sum stored widened (compiler/fold_sum_casts.go):
			// rounded as the 16-bit store rounded it.
			x := a.name
			if at != t {
				x = fmt.Sprintf("(%s)%s", t, a.name)
			}
			return fmt.Sprintf("ngen_round_%s(%s)", h, x)
		}
		if a.v.Op == "mean" {
			if at != t {
				return fmt.Sprintf("(%s)(%s / (%s)nred)", t, a.name, at)
			}
			return fmt.Sprintf("%s / (%s)nred", a.name, t)
		}
		if at != t {
			return fmt.Sprintf("(%s)%s", t, a.name)
		}
		return a.name
	}
	// laneAccs declares vec lane accumulators per reduction, indexed by
	// the loop variable idx, and returns them in accs' order.
	laneAccs := func(idx string, vec int) []acc {
		lanes := make([]acc, len(accs))
		for j, a := range accs {
			l := a
			l.name = a.name + "_l[" + idx + "]"
			l.comb = strings.Replace(a.comb, a.name, l.name, 1)
			lanes[j] = l
			fmt.Fprintf(w, "    %s %s_l[%d];\n", at, a.name, vec)
			fmt.Fprintf(w, "    for (int %s = 0; %s < %d; ++%s) %s_l[%s] = %s;\n", idx, idx, vec, idx, a.name, idx, a.init)
		}
		return lanes
	}
	// last is the innermost axis; a reduction of a scalar (sum of a
	// rank-0 value) has none, and takes the plain loop below.
	innerKept, last := false, ir.D(1)
	if len(space) > 0 {
		innerKept, last = !red[len(space)-1], space[len(space)-1]
	}
	// The strip form pays when a thread per reduceVec outputs would leave
	// SMs idle; outputs enough for a block of those on every SM (a
	// weight gradient summed over the batch: [1,256,1024] over B) take
	// the per-thread form, whose threads then all work however short the
	// reduced axis (a strip's blockDim/reduceCols row lanes idle when the
	// batch is smaller than that; the CPU's GPU-forms emulation ran 256
	// threads per 8 outputs for B = 2).
	vecFills := false
	if z := kept.Size(); len(z.Syms) == 0 && z.N >= int64(reduceFill/2)*int64(k.block[0])*reduceVec {
		vecFills = true
	}
	// ragged: the kept outputs are the inner axis alone, not a multiple
	// of reduceCols (the vocabulary's 99 bias gradients): the last strip
	// is partial, and its lanes past nout add nothing and store nothing.
	ragged := false
	if z := kept.Size(); innerKept && last.Sym == "" && last.N%reduceCols != 0 && len(z.Syms) == 0 && z.N == int64(last.N) {
		ragged = true
	}
	if innerKept && last.Sym == "" && (last.N%reduceCols == 0 || ragged) && !vecFills {
		// A block per strip of reduceCols adjacent outputs, its threads
		// splitting the reduced rows and combining through shared memory:
		// a bias gradient of 2048 outputs fills 256 blocks on a GPU
		// instead of two. A warp reads reduceCols·4-byte sectors of
		// blockDim/reduceCols rows. A block of one thread (the CPU's
		// launch, SoloBlocks) walks all the strip's columns per row, one
		// vector operation per row.
		//
		// Few strips (a bias or LayerNorm gradient of 256 outputs is 32)
		// take two phases, as the inner-axis form below: gridDim.y slices
		// of the rows, each block publishing its strip's partial sums to a
		// device global, and the last block of the strip to arrive summing
		// them in slice order (deterministic).
		cols := reduceCols
		k.sync, k.soloBlocks = true, true
		at = wide
		split := 1
		strips := int64(0)
		if z := kept.Size(); len(z.Syms) == 0 && z.N > 0 {
			strips = (z.N + int64(cols) - 1) / int64(cols)
			split = int(min(reduceSplitMax, (reduceFill+strips-1)/strips))
		}
		for j := range accs {
			fmt.Fprintf(w, "  __shared__ %s part%d[%d];\n", at, j, k.block[0])
		}
		if split > 1 {
			k.pre = splitGlobals(at, len(accs), strips*int64(cols)*int64(split), strips)
			w.WriteString("  __shared__ bool last;\n")
			fmt.Fprintf(w, "  const unsigned ys = blockDim.x == 1 ? 1u : (gridDim.y < %du ? gridDim.y : %du), yi = blockIdx.y;\n", split, split)
			w.WriteString("  if (yi >= ys) return;\n")
		} else {
			w.WriteString("  const unsigned ys = 1, yi = 0;\n")
		}
		// solo renders a one-thread block's walk of the strip of width
		// columns from o0 (nout past a ragged end), indented by ind: a
		// lane per column, row by row (the lanes unrolled for nvcc).
		outer := w
		solo := func(ind string, width int, unroll bool) {
			lanes := laneAccs("oc", width)
			ncols := strconv.Itoa(width)
			if ragged {
				ncols = "ncols"
				fmt.Fprintf(w, "%sconst int ncols = nout - o0 < %d ? (int)(nout - o0) : %d;\n", ind, width, width)
			}
			fmt.Fprintf(w, "%sfor (long long r = 0; r < nred; ++r) {\n", ind)
			if unroll {
				fmt.Fprintf(w, "%s  #pragma unroll\n", ind)
			}
			fmt.Fprintf(w, "%s  for (int oc = 0; oc < %s; ++oc) {\n", ind, ncols)
			lane := &strings.Builder{}
			w = lane
			body(ind+"    ", "base + oc + "+offset(redAxes, "r"), lanes)
			w = outer
			if usesO.MatchString(lane.String()) {
				fmt.Fprintf(w, "%s    const long long o = o0 + oc;\n", ind)
			}
			w.WriteString(lane.String())
			fmt.Fprintf(w, "%s  }\n%s}\n", ind, ind)
			fmt.Fprintf(w, "%sfor (int oc = 0; oc < %s; ++oc) {\n", ind, ncols)
			for j, a := range accs {
				fmt.Fprintf(w, "%s  %s[o0 + oc] = %s;\n", ind, out[a.v], finish(lanes[j]))
			}
			fmt.Fprintf(w, "%s}\n", ind)
		}
		if k.target != ops.CUDA {
			// The host forms run with one-thread blocks only
			// (runtime.RunOwnStack): a block walks a strip of up to
			// soloColsMax columns, row by row, one vector operation per
			// row and column group; a strip of reduceCols made every row
			// a 32-byte read 8 KB from the last (mlpbench's [128, 2048]
			// bias gradient: 463 µs a step; 151 µs now). The strips
			// start at the GPU's strip indices that are multiples of the
			// width, so the workers' spans of blocks share them. Each
			// output is the same sum, in the same order, as with strips
			// of reduceCols.
			width := soloCols(last.N, ragged)
			w.WriteString("  if (blockDim.x == 1) {\n")
			fmt.Fprintf(w, "  for (long long s = blockIdx.x; s * %d < nout; s += gridDim.x) {\n", cols)
			fmt.Fprintf(w, "    const long long o0 = s * %d;\n", cols)
			fmt.Fprintf(w, "    if (o0 %% %d != 0) continue;\n", width)
			fmt.Fprintf(w, "    const long long base = %s;\n", offset(keptAxes, "o0"))
			solo("    ", width, false)
			w.WriteString("  }\n  return;\n  }\n")
		}
		fmt.Fprintf(w, "  for (long long o0 = (long long)blockIdx.x * %d; o0 < nout; o0 += (long long)gridDim.x * %d) {\n", cols, cols)
		fmt.Fprintf(w, "    const long long base = %s;\n", offset(keptAxes, "o0"))
		if k.target == ops.CUDA {
			w.WriteString("    if (blockDim.x == 1) {\n")
			solo("      ", cols, true)
			w.WriteString("      continue;\n    }\n")
		}
		fmt.Fprintf(w, "    const int oc = (int)(threadIdx.x %% %d);\n", cols)
		for _, a := range accs {
			fmt.Fprintf(w, "    %s %s = %s;\n", at, a.name, a.init)
		}
		rows := "r < nred"
		if ragged {
			rows = "o0 + oc < nout && r < nred"
		}
		fmt.Fprintf(w, "    for (long long r = threadIdx.x / %d + (long long)yi * (blockDim.x / %d); %s; r += (long long)(blockDim.x / %d) * ys) {\n", cols, cols, rows, cols)
		lane := &strings.Builder{}
		w = lane
		body("      ", "base + oc + "+offset(redAxes, "r"), accs)
		w = outer
		if usesO.MatchString(lane.String()) {
			w.WriteString("      const long long o = o0 + oc;\n")
		}
		w.WriteString(lane.String())
		w.WriteString("    }\n")
		for j, a := range accs {
			fmt.Fprintf(w, "    part%d[threadIdx.x] = %s;\n", j, a.name)
		}
		w.WriteString("    __syncthreads();\n")
		lanesIn := fmt.Sprintf("threadIdx.x < %d", cols)
		if ragged {
			lanesIn += " && o0 + threadIdx.x < nout"
		}
		fmt.Fprintf(w, "    if (%s) {\n", lanesIn)
		for j, a := range accs {
			fmt.Fprintf(w, "      %s s%d = %s;\n", at, j, a.init)
			fmt.Fprintf(w, "      for (unsigned u = threadIdx.x; u < blockDim.x; u += %d) { const %s x = part%d[u]; s%d = %s; }\n",
				cols, at, j, j, strings.Replace(a.comb, a.name, fmt.Sprintf("s%d", j), 1))
			s := a
			s.name = fmt.Sprintf("s%d", j)
			if split > 1 {
				fmt.Fprintf(w, "      if (ys == 1) %s[o0 + threadIdx.x] = %s; else $K_part%d[(o0 + threadIdx.x) * %d + yi] = s%d;\n", out[a.v], finish(s), j, split, j)
			} else {
				fmt.Fprintf(w, "      %s[o0 + threadIdx.x] = %s;\n", out[a.v], finish(s))
			}
		}
		w.WriteString("    }\n")
		if split > 1 {
			// Each writer fences its partial before the block's arrival
			// is counted; the last block reads every slice's.
			w.WriteString("    if (ys > 1) {\n")
			w.WriteString("      __threadfence();\n")
			w.WriteString("      __syncthreads();\n")
			fmt.Fprintf(w, "      if (threadIdx.x == 0) last = ngen_arrive(&$K_count[o0 / %d]) == ys - 1;\n", cols)
			w.WriteString("      __syncthreads();\n")
			fmt.Fprintf(w, "      if (last && %s) {\n", lanesIn)
			for j, a := range accs {
				s := a
				s.name = fmt.Sprintf("s%d", j)
				fmt.Fprintf(w, "        %s s%d = %s;\n", at, j, a.init)
				fmt.Fprintf(w, "        for (unsigned y = 0; y < ys; ++y) { const %s x = ((volatile %s *)$K_part%d)[(o0 + threadIdx.x) * %d + y]; s%d = %s; }\n",
					at, at, j, split, j, strings.Replace(a.comb, a.name, s.name, 1))
				fmt.Fprintf(w, "        %s[o0 + threadIdx.x] = %s;\n", out[a.v], finish(s))
			}
			fmt.Fprintf(w, "        if (threadIdx.x == 0) $K_count[o0 / %d] = 0;\n", cols)
			w.WriteString("      }\n")
			w.WriteString("    }\n")
		}
		w.WriteString("    __syncthreads();\n  }\n")
		k.grid = gridFor(kept, cols)
		k.grid[1].Size.Mul = int64(split)
		return k
	}
	if innerKept && last.Sym == "" && last.N%reduceVec == 0 {
		// Each thread takes reduceVec adjacent outputs (one row of the
		// innermost axis holds whole groups of them): a warp still reads
		// one contiguous span per reduced index, and the CPU emulation,
		// which runs a block's threads one after another, turns the
		// group into one vector operation per reduced index instead of
		// walking a column per output.
		vec := reduceVec
		fmt.Fprintf(w, "  for (long long o0 = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * %d; o0 < nout; o0 += (long long)gridDim.x * blockDim.x * %d) {\n", vec, vec)
		fmt.Fprintf(w, "    const long long base = %s;\n", offset(keptAxes, "o0"))
		lanes := laneAccs("ov", vec)
		w.WriteString("    for (long long r = 0; r < nred; ++r) {\n")
		w.WriteString("      #pragma unroll\n")
		fmt.Fprintf(w, "      for (int ov = 0; ov < %d; ++ov) {\n", vec)
		// o, for the per-output operands (keptIndex), only where the
		// body reads one: nvcc warns of an unused variable.
		outer, lane := w, &strings.Builder{}
		w = lane
		body("        ", "base + ov + "+offset(redAxes, "r"), lanes)
		w = outer
		if usesO.MatchString(lane.String()) {
			w.WriteString("        const long long o = o0 + ov;\n")
		}
		w.WriteString(lane.String())
		w.WriteString("      }\n")
		w.WriteString("    }\n")
		fmt.Fprintf(w, "    for (int ov = 0; ov < %d; ++ov) {\n", vec)
		for j, a := range accs {
			fmt.Fprintf(w, "      %s[o0 + ov] = %s;\n", out[a.v], finish(lanes[j]))
		}
		w.WriteString("    }\n")
		w.WriteString("  }\n")
		k.grid = gridFor(kept, k.block[0]*vec)
		return k
	}
	if innerKept {
		w.WriteString("  for (long long o = (long long)blockIdx.x * blockDim.x + threadIdx.x; o < nout; o += (long long)gridDim.x * blockDim.x) {\n")
		fmt.Fprintf(w, "    const long long base = %s;\n", offset(keptAxes, "o"))
		for _, a := range accs {
			fmt.Fprintf(w, "    %s %s = %s;\n", at, a.name, a.init)
		}
		w.WriteString("    for (long long r = 0; r < nred; ++r) {\n")
		body("      ", "base + "+offset(redAxes, "r"), accs)
		w.WriteString("    }\n")
		for _, a := range accs {
			fmt.Fprintf(w, "    %s[o] = %s;\n", out[a.v], finish(a))
		}
		w.WriteString("  }\n")
		k.grid = gridFor(kept, k.block[0])
		return k
	}
	k.sync, k.soloBlocks = true, true
	at = wide
	for j := range accs {
		fmt.Fprintf(w, "  __shared__ %s partial%d[32];\n", at, j)
	}
	// Two phases when few outputs would leave SMs idle (a per-channel
	// statistic has 32 or 64): split blocks over gridDim.y slices of
	// each output's range, each publishing a partial to a device global;
	// the last to arrive sums them in slice order (deterministic). The
	// globals are static, since the emulation links every package into
	// one binary. A block of one thread (the CPU's launch) takes the
	// whole range, and its other slices return.
	split := 1
	if z := kept.Size(); len(z.Syms) == 0 && z.N > 0 {
		split = int(min(reduceSplitMax, (reduceFill+z.N-1)/z.N))
	}
	if split > 1 {
		nout := kept.Size().N
		k.pre = splitGlobals(at, len(accs), nout*int64(split), nout)
		fmt.Fprintf(w, "  const unsigned ys = blockDim.x == 1 ? 1u : (gridDim.y < %du ? gridDim.y : %du), yi = blockIdx.y;\n", split, split)
		w.WriteString("  if (yi >= ys) return;\n")
	} else {
		w.WriteString("  const unsigned ys = 1, yi = 0;\n")
	}
	w.WriteString("  for (long long o = blockIdx.x; o < nout; o += gridDim.x) {\n")
	fmt.Fprintf(w, "    const long long base = %s;\n", offset(keptAxes, "o"))
	for _, a := range accs {
		fmt.Fprintf(w, "    %s %s = %s;\n", at, a.name, a.init)
	}
	if len(redAxes) >= 2 && last.Sym == "" && last.N >= 32 {
		// The threads stride over the innermost (contiguous) reduced axis
		// inside a loop over the others (rows of 32 or more): no division
		// per element. Each thread takes vec adjacent elements at a time: a
		// warp still reads one contiguous span, and the CPU
		// emulation, which runs a block's threads one after another,
		// touches each cache line from fewer of them.
		//
		// When a row of the inner axis needs fewer threads than the block
		// has, the block covers several rows at once (rpass of them, with
		// rthreads threads each), so no thread walks the outer loop idle.
		// A row that vec does not divide ends in a partial group, whose
		// lanes past the row's end are skipped.
		vec := reduceVec
		ragged := last.N%vec != 0
		rthreads := min((last.N+vec-1)/vec, k.block[0])
		// Each of the vec lanes has its own accumulators, summed at the
		// end: the adds of one lane do not wait on another's, and the CPU
		// emulation turns the lanes into one vector add.
		lanes := laneAccs("ri_v", vec)
		fmt.Fprintf(w, "    const long long rthreads = %dLL < (long long)blockDim.x ? %dLL : (long long)blockDim.x;\n", rthreads, rthreads)
		w.WriteString("    const long long rpass = (long long)blockDim.x / rthreads;\n")
		w.WriteString("    const long long rt = (long long)threadIdx.x % rthreads;\n")
		w.WriteString("    for (long long ro = (long long)threadIdx.x / rthreads + yi * rpass; ro < nred / " + fmt.Sprint(last.N) + "LL && (long long)threadIdx.x < rpass * rthreads; ro += rpass * ys) {\n")
		fmt.Fprintf(w, "      const long long base_o = base + %s;\n", offset(redAxes[:len(redAxes)-1], "ro"))
		fmt.Fprintf(w, "      for (long long rv = rt * %d; rv < %dLL; rv += rthreads * %d) {\n", vec, last.N, vec)
		fmt.Fprintf(w, "        #pragma unroll\n")
		fmt.Fprintf(w, "        for (int ri_v = 0; ri_v < %d; ++ri_v) {\n", vec)
		fmt.Fprintf(w, "          const long long ri = rv + ri_v;\n")
		if ragged {
			fmt.Fprintf(w, "          if (ri < %dLL) {\n", last.N)
			body("            ", "base_o + ri", lanes)
			w.WriteString("          }\n")
		} else {
			body("          ", "base_o + ri", lanes)
		}
		w.WriteString("        }\n")
		w.WriteString("      }\n")
		w.WriteString("    }\n")
		for _, a := range accs {
			x := a.name + "_l[ri_v]"
			fmt.Fprintf(w, "    for (int ri_v = 0; ri_v < %d; ++ri_v) { const %s x = %s; %s = %s; }\n", vec, at, x, a.name, a.comb)
		}
	} else {
		w.WriteString("    for (long long r = threadIdx.x + (long long)yi * blockDim.x; r < nred; r += (long long)blockDim.x * ys) {\n")
		body("      ", "base + "+offset(redAxes, "r"), accs)
		w.WriteString("    }\n")
	}
	// A block of one thread (the CPU backend's launch, KernelInfo.SoloBlocks)
	// holds the whole result already: the warp combination below assumes
	// full warps.
	w.WriteString("    if (blockDim.x == 1) {\n")
	for _, a := range accs {
		fmt.Fprintf(w, "      %s[o] = %s;\n", out[a.v], finish(a))
	}
	w.WriteString("      continue;\n")
	w.WriteString("    }\n")
	for j, a := range accs {
		fmt.Fprintf(w, "    %s = %s(%s);\n", a.name, a.warp, a.name)
		fmt.Fprintf(w, "    if ((threadIdx.x & 31) == 0) partial%d[threadIdx.x >> 5] = %s;\n", j, a.name)
	}
	w.WriteString("    __syncthreads();\n")
	w.WriteString("    if (threadIdx.x < 32) {\n")
	for j, a := range accs {
		fmt.Fprintf(w, "      %s = threadIdx.x < (blockDim.x + 31) / 32 ? partial%d[threadIdx.x] : %s;\n", a.name, j, a.init)
		fmt.Fprintf(w, "      %s = %s(%s);\n", a.name, a.warp, a.name)
		if split > 1 {
			fmt.Fprintf(w, "      if (threadIdx.x == 0) { if (ys == 1) %s[o] = %s; else $K_part%d[o * %d + yi] = %s; }\n", out[a.v], finish(a), j, split, a.name)
		} else {
			fmt.Fprintf(w, "      if (threadIdx.x == 0) %s[o] = %s;\n", out[a.v], finish(a))
		}
	}
	if split > 1 {
		w.WriteString("      if (threadIdx.x == 0 && ys > 1 && ngen_arrive(&$K_count[o]) == ys - 1) {\n")
		for j, a := range accs {
			fmt.Fprintf(w, "        %s = %s;\n", a.name, a.init)
			fmt.Fprintf(w, "        for (unsigned y = 0; y < ys; ++y) { const %s x = ((volatile %s *)$K_part%d)[o * %d + y]; %s = %s; }\n", at, at, j, split, a.name, a.comb)
			fmt.Fprintf(w, "        %s[o] = %s;\n", out[a.v], finish(a))
		}
		w.WriteString("        $K_count[o] = 0;\n")
		w.WriteString("      }\n")
	}
	w.WriteString("    }\n")
	w.WriteString("    __syncthreads();\n")
	w.WriteString("  }\n")
	z := kept.Size()
	k.grid = gridFor(nil, 1)
	k.grid[0].Size.Mul, k.grid[0].Size.Syms, k.grid[0].Div, k.grid[0].Max = z.N, z.Syms, 1, 1<<16
	k.grid[1].Size.Mul = int64(split)
	return k
}

// splitGlobals declares a two-phase reduction's device globals: parts
// partials of type t for each of its accs reductions, and counts arrival
// counters.
func splitGlobals(t string, accs int, parts, counts int64) string {
	var pre strings.Builder
	for j := range accs {
		fmt.Fprintf(&pre, "static __device__ %s $K_part%d[%d];\n", t, j, parts)
	}
	fmt.Fprintf(&pre, "static __device__ unsigned $K_count[%d];\n", counts)
	return pre.String()
}

// usesO matches a read of the output index o.
var usesO = regexp.MustCompile(`\bo\b`)

// reduceCols is how many adjacent outputs a block of a kept-inner-axis
// reduction takes (a 32-byte sector of f32); reduceFill is the number of
// blocks a reduction with few outputs aims for, twice an H100's 132 SMs,
// in at most reduceSplitMax slices per output.
const (
	reduceCols     = 8
	reduceFill     = 264
	reduceSplitMax = 32
)

// soloCols is the width of a host form's strip over an inner kept axis of
// n outputs: the widest multiple of reduceCols up to soloColsMax that
// divides n, so that a strip never crosses into the next row of outputs;
// with ragged outputs (n alone, not a multiple of reduceCols) n rounded
// up, at most soloColsMax, the last strip partial.
func soloCols(n int, ragged bool) int {
	if ragged {
		return min(soloColsMax, (n+reduceCols-1)/reduceCols*reduceCols)
	}
	for w := soloColsMax; w > reduceCols; w -= reduceCols {
		if n%w == 0 {
			return w
		}
	}
	return reduceCols
}

const soloColsMax = 256

// reduceVec is how many adjacent elements a reduction thread takes at a
// time along a contiguous reduced axis.
const reduceVec = 4

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// mergeAxes merges runs of adjacent static dimensions that are all reduced
// or all kept: the linear index is the same, and each merged run costs one
// division instead of several in the kernel's index arithmetic (the
// N, H, W of a per-channel statistic become N and H·W).
func mergeAxes(space ir.Shape, axes []int) (ir.Shape, []int) {
	norm, _ := ir.NormAxes(axes, len(space))
	var out ir.Shape
	var outAxes []int
	for i, d := range space {
		red := contains(norm, i)
		if n := len(out); n > 0 && i > 0 && red == contains(norm, i-1) && d.Sym == "" && out[n-1].Sym == "" {
			out[n-1] = ir.D(out[n-1].N * d.N)
			continue
		}
		out = append(out, d)
		if red {
			outAxes = append(outAxes, len(out)-1)
		}
	}
	return out, outAxes
}

func kindOf(v *ir.Value) ops.Kind { return ops.Lookup(v.Op).Kind }
