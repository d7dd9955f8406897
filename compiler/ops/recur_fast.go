package ops

import (
	"github.com/ngen-ml/ngen/compiler/ir"
)

// The host target's per-step-GEMM form of rnn_scan and rnn_scan_bwd (a
// function of the host glue, not of the .cu): a block takes a chunk of up to fastChunk sequences and, at every
// time step, runs the recurrent product of the whole chunk as one GEMM on
// the host's GEMM library (ngen_emu::gemm: oneDNN's sgemm, OpenBLAS's
// dgemm), then one pass of the cell over every unit of every sequence,
// with f32 transcendentals that the host compiler vectorises
// (ngen_emu::fast_expf and friends). Backward is the same per step: the
// cell's backward, then dh_{t-1} = dpre_t · W_hh as one GEMM. The weight
// gradient stays one GEMM over all steps after the loop (scanGrad).
//
// The CPU backend launches this form with one-thread blocks on the
// worker's own stack (runtime.RunOwnStack: the library wants more stack
// than a fiber has). The HostBaseline target renders the tiled form
// (recur_solo.go) instead, whose arithmetic follows the GPU form's step
// for step; the GPU-forms comparison relies on that.

// fastChunk is the most sequences one block's GEMMs cover: the GEMM's M.
const fastChunk = 64

// fastMath renders the cell's logistic function and tanh of x: the
// vectorisable ones for f32, the C library's for f64.
func fastMath(c *Ctx) (sig, tanh func(string) string) {
	if c.T == "float" {
		return func(x string) string { return "::ngen_emu::fast_sigmoidf(" + x + ")" },
			func(x string) string { return "::ngen_emu::fast_tanhf(" + x + ")" }
	}
	return func(x string) string { return sigmoid(c, x) },
		func(x string) string { return c.Math("tanh") + "(" + x + ")" }
}

// fastOpen starts the form as a lambda; fastClose calls it, in a copy
// compiled for AVX2 and FMA where the host has them.
func fastOpen(g *cg, c *Ctx, b ir.Dim) {
	g.f("  auto fast = [&]() __attribute__((always_inline)) {")
	g.f("  const long long nb = %s;", c.Dim(b))
	g.f("  for (long long b0 = (long long)blockIdx.x * %d; b0 < nb; b0 += (long long)gridDim.x * %d) {", fastChunk, fastChunk)
	g.f("    const int ns = nb - b0 < %d ? (int)(nb - b0) : %d;", fastChunk, fastChunk)
}

func fastClose(g *cg) {
	g.f("  }")
	g.f("  };")
	g.f("#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)")
	g.f("  auto fast_fma = [&]() __attribute__((target(\"avx2,fma\"))) { fast(); };")
	g.f("  if (::ngen_emu::scan_fma()) {")
	g.f("    fast_fma();")
	g.f("    return;")
	g.f("  }")
	g.f("#endif")
	g.f("  fast();")
}

func scanFwdFast(g *cg, c *Ctx, v *ir.Value, at func(int, string) string, out string) {
	cell := Cells[v.Attrs.Str]
	xp, whh := v.Args[0], v.Args[1]
	B, T, H := xp.Shape[0], xp.Shape[1].N, whh.Shape[1].N
	G, W := cell.Gates, cell.Width*H
	t := c.T
	sig, tanh := fastMath(c)
	masked := len(v.Args) > 4
	fastOpen(g, c, B)
	// The initial states, copied: either may be a constant (no storage).
	g.f("    %s *h0s = ::ngen_emu::scan_scratch<%s>(1, (long long)ns * %d);", t, t, H)
	if G == 4 {
		g.f("    %s *c0s = ::ngen_emu::scan_scratch<%s>(2, (long long)ns * %d);", t, t, H)
	}
	g.f("    for (int s = 0; s < ns; ++s)")
	g.f("      for (int j = 0; j < %d; ++j) {", H)
	g.f("        h0s[s * %d + j] = %s;", H, at(2, "(b0 + s) * "+itoa(H)+" + j"))
	if G == 4 {
		g.f("        c0s[s * %d + j] = %s;", H, at(3, "(b0 + s) * "+itoa(H)+" + j"))
	}
	g.f("      }")
	g.f("    %s *gates = ::ngen_emu::scan_scratch<%s>(0, (long long)ns * %d);", t, t, G*H)
	g.f("    for (int t = 0; t < %d; ++t) {", T)
	// gates = h_{t-1} · W_hhᵀ for the chunk: h_{t-1} is row t-1 of S.
	g.f("      const %s *hp = t ? %s + (b0 * %d + t - 1) * %d : h0s;", t, out, T, W)
	g.f("      ::ngen_emu::gemm(false, true, ns, %d, %d, (%s)1, hp, t ? %d : %d, &%s, %d, (%s)0, gates, %d);", G*H, H, t, T*W, H, at(1, "0"), H, t, G*H)
	g.f("      for (int s = 0; s < ns; ++s) {")
	g.f("        const long long b = b0 + s;")
	g.f("        %s *o = %s + (b * %d + t) * %d;", t, out, T, W)
	g.f("        const %s *hq = t ? o - %d : h0s + s * %d;", t, W, H)
	if G == 4 {
		g.f("        const %s *cq = t ? o - %d : c0s + s * %d;", t, W-H, H)
	}
	g.f("        const %s *ga = gates + (long long)s * %d;", t, G*H)
	g.f("        const long long xo = (b * %d + t) * %d;", T, G*H)
	keep := func(x, prev string) string {
		if !masked {
			return x
		}
		return "(on ? " + x + " : " + prev + ")"
	}
	if masked {
		g.f("        const bool on = %s != 0;", at(4, "b * "+itoa(T)+" + t"))
	}
	g.f("#pragma GCC ivdep")
	g.f("        for (int j = 0; j < %d; ++j) {", H)
	pre := func(q int) string { return "ga[" + itoa(q*H) + " + j] + " + at(0, "xo + "+itoa(q*H)+" + j") }
	switch cell.Name {
	case "rnn_tanh":
		g.f("          o[j] = %s;", keep(tanh(pre(0)), "hq[j]"))
	case "rnn_relu":
		g.f("          const %s a = %s;", t, pre(0))
		g.f("          o[j] = %s;", keep("(a > "+c.Lit(0)+" ? a : "+c.Lit(0)+")", "hq[j]"))
	case "lstm":
		lstmForward(g, "          ", t, "o", "o_", H, [4]string{sig(pre(0)), sig(pre(1)), tanh(pre(2)), sig(pre(3))}, tanh, "cq[j]", "hq[j]", keep)
	}
	g.f("        }")
	g.f("      }")
	g.f("    }")
	fastClose(g)
}

func scanBwdFast(g *cg, c *Ctx, v *ir.Value, at func(int, string) string, out string) {
	cell := Cells[v.Attrs.Str]
	S0, whh := v.Args[1], v.Args[2]
	B, T, H := S0.Shape[0], S0.Shape[1].N, whh.Shape[1].N
	G, W := cell.Gates, cell.Width*H
	t := c.T
	masked := len(v.Args) > 5
	fastOpen(g, c, B)
	// dh and dc: the gradients of the state carried into step t from t+1.
	g.f("    %s *dh = ::ngen_emu::scan_scratch<%s>(0, (long long)ns * %d);", t, t, H)
	if G == 4 {
		g.f("    %s *dc = ::ngen_emu::scan_scratch<%s>(1, (long long)ns * %d);", t, t, H)
		g.f("    %s *c0s = ::ngen_emu::scan_scratch<%s>(2, (long long)ns * %d);", t, t, H)
	}
	g.f("    for (int s = 0; s < ns; ++s)")
	g.f("      for (int j = 0; j < %d; ++j) {", H)
	g.f("        dh[s * %d + j] = %s;", H, c.Lit(0))
	if G == 4 {
		g.f("        dc[s * %d + j] = %s;", H, c.Lit(0))
		g.f("        c0s[s * %d + j] = %s;", H, at(4, "(b0 + s) * "+itoa(H)+" + j"))
	}
	g.f("      }")
	g.f("    const %s *sv = &%s;", t, at(1, "0"))
	g.f("    for (int t = %d; t >= 0; --t) {", T-1)
	g.f("      for (int s = 0; s < ns; ++s) {")
	g.f("        const long long b = b0 + s;")
	g.f("        const long long so = (b * %d + t) * %d;", T, W)
	g.f("        %s *d = %s + (b * %d + t) * %d;", t, out, T+1, G*H)
	g.f("        %s *dhs = dh + (long long)s * %d;", t, H)
	if G == 4 {
		g.f("        %s *dcs = dc + (long long)s * %d;", t, H)
		g.f("        const %s *cq = t ? sv + so - %d : c0s + (long long)s * %d;", t, W-H, H)
	}
	if masked {
		// A masked-off step passes the state's gradient through (dh then
		// holds it for the GEMM to add to) and has no gate gradients.
		g.f("        if (%s == 0) {", at(5, "b * "+itoa(T)+" + t"))
		g.f("          for (int j = 0; j < %d; ++j) {", H)
		g.f("            dhs[j] += %s;", at(0, "so + j"))
		if G == 4 {
			g.f("            dcs[j] += %s;", at(0, "so + "+itoa(H)+" + j"))
		}
		g.f("          }")
		g.f("          for (int j = 0; j < %d; ++j) d[j] = %s;", G*H, c.Lit(0))
		g.f("          continue;")
		g.f("        }")
	}
	g.f("#pragma GCC ivdep")
	g.f("        for (int j = 0; j < %d; ++j) {", H)
	g.f("          const %s dhj = dhs[j] + %s;", t, at(0, "so + j"))
	if masked {
		g.f("          dhs[j] = %s;", c.Lit(0))
	}
	switch cell.Name {
	case "rnn_tanh":
		g.f("          const %s h = sv[so + j];", t)
		g.f("          d[j] = dhj * (%s - h * h);", c.Lit(1))
	case "rnn_relu":
		g.f("          d[j] = sv[so + j] > %s ? dhj : %s;", c.Lit(0), c.Lit(0))
	case "lstm":
		sv := func(off int) string { return "sv[so + " + itoa(off) + " + j]" }
		g.f("          const %s cn = %s, i = %s, f = %s, gg = %s, o = %s;", t, sv(H), sv(2*H), sv(3*H), sv(4*H), sv(5*H))
		// tanh(c) from h = o·tanh(c) would divide by o; recompute it.
		_, tanh := fastMath(c)
		di, df, dgg, do := lstmBackward(g, "          ", t, c.Lit(1), tanh, "dcs[j]", at(0, "so + "+itoa(H)+" + j"), "cq[j]")
		g.f("          d[j] = %s;", di)
		g.f("          d[%d + j] = %s;", H, df)
		g.f("          d[%d + j] = %s;", 2*H, dgg)
		g.f("          d[%d + j] = %s;", 3*H, do)
		g.f("          dcs[j] = dcj * f;")
	}
	g.f("        }")
	g.f("      }")
	// dh_{t-1} = dpre_t · W_hh for the chunk (plus, masked, what the
	// masked-off steps passed through).
	beta := "0"
	if masked {
		beta = "1"
	}
	g.f("      ::ngen_emu::gemm(false, false, ns, %d, %d, (%s)1, %s + (b0 * %d + t) * %d, %d, &%s, %d, (%s)%s, dh, %d);",
		H, G*H, t, out, T+1, G*H, (T+1)*G*H, at(2, "0"), H, t, beta, H)
	g.f("    }")
	g.f("    for (int s = 0; s < ns; ++s) {")
	g.f("      %s *last = %s + ((b0 + s) * %d + %d) * %d;", t, out, T+1, T, G*H)
	g.f("      for (int j = 0; j < %d; ++j) {", G*H)
	if G == 4 {
		g.f("        last[j] = j < %d ? dh[s * %d + j] : (j < %d ? dc[s * %d + j - %d] : %s);", H, H, 2*H, H, H, c.Lit(0))
	} else {
		g.f("        last[j] = dh[s * %d + j];", H)
	}
	g.f("      }")
	g.f("    }")
	fastClose(g)
}
