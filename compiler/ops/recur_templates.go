package ops

import (
	"strconv"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// The kernel bodies of rnn_scan and its gradient. Where W_hh is large
// (SteppedMinBytes) the GPU form is the stepped one (recur_stepped.go), a
// time step a launch; otherwise the kernel runs a block
// per sequence (a grid-stride loop over the batch); the block's threads
// share the hidden units, and the state of the previous step sits in
// shared memory, so each step is the recurrent product, the cell and two
// barriers. The host target renders the CPU backend's forms instead, for
// one-thread blocks: a GEMM per time step (recur_fast.go), or for
// HostBaseline a tile of sequences per block (recur_solo.go).

// sigmoid renders 1/(1+exp(-x)).
func sigmoid(c *Ctx, x string) string {
	return "(" + c.Lit(1) + " / (" + c.Lit(1) + " + " + c.Math("exp") + "(-(" + x + "))))"
}

// The LSTM cell's formulas, written once for every form of rnn_scan and
// rnn_scan_bwd (the loop form here, the stepped form, the host's GEMM
// form and the baseline's tiles); each form supplies its own names.

// lstmForward renders unit j's step: the gates from their activated
// pre-activations gate (i, f, g, o; the output gate named ov), the cell
// state from cp, the hidden state into arr[j] and the saved state (c, i,
// f, g, o) into arr[k·H + j]; keep(x, prev) keeps prev where the step is
// masked off.
func lstmForward(g *cg, ind, t, arr, ov string, H int, gate [4]string, tanh func(string) string, cp, hp string, keep func(x, prev string) string) {
	g.f("%sconst %s i = %s, f = %s, gg = %s, %s = %s;", ind, t, gate[0], gate[1], gate[2], ov, gate[3])
	g.f("%sconst %s cn = f * %s + i * gg;", ind, t, cp)
	g.f("%s%s[j] = %s;", ind, arr, keep(ov+" * "+tanh("cn"), hp))
	g.f("%s%s[%d + j] = %s; %s[%d + j] = i; %s[%d + j] = f; %s[%d + j] = gg; %s[%d + j] = %s;", ind, arr, H, keep("cn", cp), arr, 2*H, arr, 3*H, arr, 4*H, arr, 5*H, ov)
}

// lstmBackward renders unit j's tanh(c_t) (tc) and cell-state gradient
// dcj (the carried dcIn, the saved state's own gradient dcOut, and the
// hidden state's dhj through the output gate) from the saved cn, i, f, gg
// and o, and returns the gradients of the four gates' pre-activations;
// cp is c_{t-1}. The carry to step t-1 is dcj·f.
func lstmBackward(g *cg, ind, t, one string, tanh func(string) string, dcIn, dcOut, cp string) (di, df, dgg, do string) {
	g.f("%sconst %s tc = %s;", ind, t, tanh("cn"))
	g.f("%sconst %s dcj = %s + %s + dhj * o * (%s - tc * tc);", ind, t, dcIn, dcOut, one)
	return "dcj * gg * i * (" + one + " - i)", "dcj * " + cp + " * f * (" + one + " - f)",
		"dcj * i * (" + one + " - gg * gg)", "dhj * tc * o * (" + one + " - o)"
}

func scanFwdLoop(c *Ctx, v *ir.Value, at func(int, string) string, out string) string {
	cell := Cells[v.Attrs.Str]
	xp, whh := v.Args[0], v.Args[1]
	B, T, H := xp.Shape[0], xp.Shape[1].N, whh.Shape[1].N
	G, W := cell.Gates, cell.Width*H
	g := &cg{}
	t := c.T
	switch c.Target {
	case Host:
		scanFwdFast(g, c, v, at, out)
		return g.b.String()
	case HostBaseline:
		scanFwdSolo(g, c, v, at, out)
		return g.b.String()
	}
	if c.Launch != "" {
		scanFwdStepped(g, c, v, at, out)
		return g.b.String()
	}
	g.f("__shared__ %s hs[%d];", t, H)
	if G == 4 {
		g.f("__shared__ %s cs[%d];", t, H)
	}
	// With the gates' pre-activations in shared memory (up to 32 KiB),
	// the recurrent product runs a warp per row; beyond that, a thread
	// per hidden unit walks its rows (strided reads).
	warpRows := G*H*v.DType.Size() <= 32<<10
	if warpRows {
		g.f("__shared__ %s pre[%d];", t, G*H)
	}
	g.f("const long long nb = %s;", c.Dim(B))
	g.f("for (long long b = blockIdx.x; b < nb; b += gridDim.x) {")
	g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) {", H)
	g.f("    hs[j] = %s;", at(2, "b * "+itoa(H)+" + j"))
	if G == 4 {
		g.f("    cs[j] = %s;", at(3, "b * "+itoa(H)+" + j"))
	}
	g.f("  }")
	g.f("  __syncthreads();")
	g.f("  for (int t = 0; t < %d; ++t) {", T)
	g.f("    const long long xo = (b * %d + t) * %d;", T, G*H)
	g.f("    %s *s = %s + (b * %d + t) * %d;", t, out, T, W)
	if warpRows {
		// The recurrent product W_hh·h: a warp per row of W_hh at a
		// time, its lanes reading the row's consecutive elements
		// (coalesced), summed across the warp into pre.
		g.f("    for (int r = threadIdx.x >> 5; r < %d; r += blockDim.x >> 5) {", G*H)
		g.f("      %s acc = %s;", t, c.Lit(0))
		g.f("      for (int k = threadIdx.x & 31; k < %d; k += 32) acc += %s * hs[k];", H, at(1, "(long long)r * "+itoa(H)+" + k"))
		g.f("      acc = ngen_warp_sum(acc);")
		g.f("      if ((threadIdx.x & 31) == 0) pre[r] = acc;")
		g.f("    }")
		g.f("    __syncthreads();")
	}
	g.f("    for (int j = threadIdx.x; j < %d; j += blockDim.x) {", H)
	if warpRows {
		for q := 0; q < G; q++ {
			g.f("      %s a%d = %s + pre[%d + j];", t, q, at(0, "xo + "+itoa(q*H)+" + j"), q*H)
		}
	} else {
		for q := 0; q < G; q++ {
			g.f("      %s a%d = %s;", t, q, at(0, "xo + "+itoa(q*H)+" + j"))
		}
		// The recurrent product W_hh·h for this unit's rows of every gate.
		g.f("      for (int k = 0; k < %d; ++k) {", H)
		g.f("        const %s hk = hs[k];", t)
		for q := 0; q < G; q++ {
			g.f("        a%d += %s * hk;", q, at(1, "(long long)("+itoa(q*H)+" + j) * "+itoa(H)+" + k"))
		}
		g.f("      }")
	}
	masked := len(v.Args) > 4
	keep := func(x, prev string) string { // a masked-off step keeps the state
		if !masked {
			return x
		}
		return "(on ? " + x + " : " + prev + ")"
	}
	if masked {
		g.f("      const bool on = %s != 0;", at(4, "b * "+itoa(T)+" + t"))
	}
	switch cell.Name {
	case "rnn_tanh":
		g.f("      s[j] = %s;", keep(c.Math("tanh")+"(a0)", "hs[j]"))
	case "rnn_relu":
		g.f("      s[j] = %s;", keep("(a0 > "+c.Lit(0)+" ? a0 : "+c.Lit(0)+")", "hs[j]"))
	case "lstm":
		tanh := func(x string) string { return c.Math("tanh") + "(" + x + ")" }
		lstmForward(g, "      ", t, "s", "o", H, [4]string{sigmoid(c, "a0"), sigmoid(c, "a1"), tanh("a2"), sigmoid(c, "a3")}, tanh, "cs[j]", "hs[j]", keep)
	}
	g.f("    }")
	g.f("    __syncthreads();")
	g.f("    for (int j = threadIdx.x; j < %d; j += blockDim.x) {", H)
	g.f("      hs[j] = s[j];")
	if G == 4 {
		g.f("      cs[j] = s[%d + j];", H)
	}
	g.f("    }")
	g.f("    __syncthreads();")
	g.f("  }")
	g.f("}")
	return g.b.String()
}

func scanBwdLoop(c *Ctx, v *ir.Value, at func(int, string) string, out string) string {
	cell := Cells[v.Attrs.Str]
	S, whh := v.Args[1], v.Args[2]
	B, T, H := S.Shape[0], S.Shape[1].N, whh.Shape[1].N
	G, W := cell.Gates, cell.Width*H
	g := &cg{}
	t := c.T
	switch c.Target {
	case Host:
		scanBwdFast(g, c, v, at, out)
		return g.b.String()
	case HostBaseline:
		scanBwdSolo(g, c, v, at, out)
		return g.b.String()
	}
	if c.Launch != "" {
		scanBwdStepped(g, c, v, at, out)
		return g.b.String()
	}
	g.f("__shared__ %s dh[%d];", t, H)
	if G == 4 { // only the LSTM carries a cell state (nvcc warns of an unused dc)
		g.f("__shared__ %s dc[%d];", t, H)
	}
	g.f("__shared__ %s dg[%d];", t, G*H)
	masked := len(v.Args) > 5
	if masked {
		g.f("__shared__ %s carry[%d];", t, H)
	}
	g.f("const long long nb = %s;", c.Dim(B))
	g.f("for (long long b = blockIdx.x; b < nb; b += gridDim.x) {")
	if G == 4 {
		g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) { dh[j] = %s; dc[j] = %s; }", H, c.Lit(0), c.Lit(0))
	} else {
		g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) dh[j] = %s;", H, c.Lit(0))
	}
	g.f("  __syncthreads();")
	g.f("  for (int t = %d; t >= 0; --t) {", T-1)
	g.f("    const long long so = (b * %d + t) * %d;", T, W)
	g.f("    %s *d = %s + (b * %d + t) * %d;", t, out, T+1, G*H)
	g.f("    for (int j = threadIdx.x; j < %d; j += blockDim.x) {", H)
	g.f("      const %s dhj = dh[j] + %s;", t, at(0, "so + j"))
	if masked {
		// A masked-off step passes the state's gradient through.
		g.f("      if (%s == 0) {", at(5, "b * "+itoa(T)+" + t"))
		g.f("        carry[j] = dhj;")
		if G == 4 {
			g.f("        dc[j] += %s;", at(0, "so + "+itoa(H)+" + j"))
		}
		for q := 0; q < G; q++ {
			g.f("        d[%d + j] = %s; dg[%d + j] = %s;", q*H, c.Lit(0), q*H, c.Lit(0))
		}
		g.f("        continue;")
		g.f("      }")
		g.f("      carry[j] = %s;", c.Lit(0))
	}
	switch cell.Name {
	case "rnn_tanh":
		g.f("      const %s h = %s;", t, at(1, "so + j"))
		g.f("      const %s da = dhj * (%s - h * h);", t, c.Lit(1))
		g.f("      d[j] = da; dg[j] = da;")
	case "rnn_relu":
		g.f("      const %s da = %s > %s ? dhj : %s;", t, at(1, "so + j"), c.Lit(0), c.Lit(0))
		g.f("      d[j] = da; dg[j] = da;")
	case "lstm":
		at1 := func(off int) string { return at(1, "so + "+itoa(off)+" + j") }
		g.f("      const %s cn = %s, i = %s, f = %s, gg = %s, o = %s;", t, at1(H), at1(2*H), at1(3*H), at1(4*H), at1(5*H))
		g.f("      const %s cp = t > 0 ? %s : %s;", t, at(1, "so - "+itoa(W)+" + "+itoa(H)+" + j"), at(4, "b * "+itoa(H)+" + j"))
		di, df, dgg, do := lstmBackward(g, "      ", t, c.Lit(1), func(x string) string { return c.Math("tanh") + "(" + x + ")" }, "dc[j]", at(0, "so + "+itoa(H)+" + j"), "cp")
		g.f("      const %s di = %s, df = %s;", t, di, df)
		g.f("      const %s dgg = %s, do_ = %s;", t, dgg, do)
		g.f("      d[j] = di; d[%d + j] = df; d[%d + j] = dgg; d[%d + j] = do_;", H, 2*H, 3*H)
		g.f("      dg[j] = di; dg[%d + j] = df; dg[%d + j] = dgg; dg[%d + j] = do_;", H, 2*H, 3*H)
		g.f("      dc[j] = dcj * f;")
	}
	g.f("    }")
	g.f("    __syncthreads();")
	// dh_{t-1} = W_hhᵀ · dpre_t.
	g.f("    for (int j = threadIdx.x; j < %d; j += blockDim.x) {", H)
	// Four partial sums: four independent loads and FMA chains in flight
	// per thread (the loop is bound by L2 latency, not bandwidth).
	g.f("      %s acc0 = %s, acc1 = %s, acc2 = %s, acc3 = %s;", t, c.Lit(0), c.Lit(0), c.Lit(0), c.Lit(0))
	g.f("      int r = 0;")
	g.f("      for (; r + 3 < %d; r += 4) {", G*H)
	for u := 0; u < 4; u++ {
		g.f("        acc%d += %s * dg[r + %d];", u, at(2, "(long long)(r + "+itoa(u)+") * "+itoa(H)+" + j"), u)
	}
	g.f("      }")
	g.f("      for (; r < %d; ++r) acc0 += %s * dg[r];", G*H, at(2, "(long long)r * "+itoa(H)+" + j"))
	g.f("      const %s acc = (acc0 + acc1) + (acc2 + acc3);", t)
	if masked {
		g.f("      dh[j] = acc + carry[j];")
	} else {
		g.f("      dh[j] = acc;")
	}
	g.f("    }")
	g.f("    __syncthreads();")
	g.f("  }")
	g.f("  %s *last = %s + (b * %d + %d) * %d;", t, out, T+1, T, G*H)
	g.f("  for (int j = threadIdx.x; j < %d; j += blockDim.x) {", G*H)
	if G == 4 {
		g.f("    last[j] = j < %d ? dh[j] : (j < %d ? dc[j - %d] : %s);", H, 2*H, H, c.Lit(0))
	} else {
		g.f("    last[j] = dh[j];")
	}
	g.f("  }")
	g.f("  __syncthreads();")
	g.f("}")
	return g.b.String()
}

func itoa(n int) string { return strconv.Itoa(n) }
