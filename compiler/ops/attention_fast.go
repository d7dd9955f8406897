package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// The host target's GEMM form of attention and attention_bwd (f32), as
// the recurrences' form is (recur_fast.go): a function of the host glue,
// run with one-thread blocks on the worker's own stack
// (runtime.RunOwnStack). HostBaseline keeps the GPU form.
//
// The flash form computes every score with a scalar dot product and an
// expf per element, and its backward computes each score twice (once for
// the query tile's dq, once for the key tile's dk and dv); on one CPU core
// that made the fused plan slower than the unfused one, whose batched
// GEMMs run on the host's GEMM library. Here the item of a (batch, head)'s
// first tile computes the whole head (the other items of the head have
// nothing left to do): the T×T scores as one GEMM into a per-worker
// scratch (a host buffer, never global memory of the plan), the masked
// softmax and the dropout factors with ngen_emu::fast_expf and the
// vectorised ngen_dropout (the same Philox bits, drawn at the same
// indices, as every other form), then the output as one more GEMM.
// Backward recomputes the scores once and forms dq, dk and dv as three
// GEMMs. The arithmetic differs from the flash form's only in the order
// of sums and in exp's last bits.

// attnFastOK says whether the GEMM form applies: float arithmetic (f32,
// or 16-bit q, k and v under mixed precision, where c.T is float, the
// type they widen to), and q, k and v in memory (a constant operand has
// no address to hand the library). A 16-bit head is widened into a
// per-worker f32 scratch first (attnWide), exact, so that the library's
// sgemm forms the products the flash form forms in float: the same
// policy (f32 scores, softmax and accumulation, the result rounded to
// 16 bits once), with sums in another order.
func attnFastOK(c *Ctx, args []*ir.Value) bool {
	if c.T != "float" {
		return false
	}
	for _, a := range args {
		if a.Op == "fill" || a.DType != args[0].DType {
			return false
		}
	}
	return true
}

// attnWide widens a head's rows × dh block of a 16-bit operand, whose
// element (r, d) is at(r, d), into the contiguous f32 block dst (ld dh).
func (g *cg) attnWide(dst string, rows, dh int, at func(r, d string) string) {
	g.f("    for (int r = 0; r < %d; ++r)", rows)
	g.f("      for (int d = 0; d < %d; ++d) %s[r * %d + d] = (float)%s;", dh, dst, dh, at("r", "d"))
}

// attnFastOpen starts the form: per-worker scratch, and the loop over the
// items whose index modulo per is 0, one per (b, h).
func attnFastOpen(g *cg, c *Ctx, a attnDims, per int, scratch int) {
	// Each scratch holds a Tq×Tk score matrix or, in the forward, the
	// Tq×dh output before its scaling: keys shorter than the head (Tk <
	// dh) need the larger.
	for s := 0; s < scratch; s++ {
		g.f("  float *scr%d = ::ngen_emu::scan_scratch<float>(%d, %d);", s, s, a.Tq*max(a.Tk, a.Dh))
	}
	g.f("  float *rows = ::ngen_emu::scan_scratch<float>(3, %d);", 2*a.Tq)
	g.f("  const long long nitems = %s * %d;", c.Dim(a.B), a.H*per)
	g.f("  for (long long it = blockIdx.x; it < nitems; it += gridDim.x) {")
	g.f("    if (it %% %d != 0) continue; // the head's first item computes the whole head", per)
	g.f("    const long long b = it / %d;", a.H*per)
	g.f("    const int h = (int)(it / %d %% %d);", per, a.H)
}

func attnFastClose(g *cg) {
	g.f("  }")
}

// rowSum renders dst = Σ_k src[k] over k in [0, n) in eight partial sums,
// which g++ vectorises (one serial float sum it may not reorder).
func (g *cg) rowSum(ind, dst, src string, n int) {
	full := n - n%8
	g.f("%sfloat %s_p[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};", ind, dst)
	g.f("%sfor (int k0 = 0; k0 < %d; k0 += 8)", ind, full)
	g.f("%s  for (int u = 0; u < 8; ++u) %s_p[u] += %s;", ind, dst, fmt.Sprintf(src, "(k0 + u)"))
	g.f("%sfloat %s = ((%s_p[0] + %s_p[1]) + (%s_p[2] + %s_p[3])) + ((%s_p[4] + %s_p[5]) + (%s_p[6] + %s_p[7]));", ind, dst, dst, dst, dst, dst, dst, dst, dst, dst)
	if full < n {
		g.f("%sfor (int k = %d; k < %d; ++k) %s += %s;", ind, full, n, dst, fmt.Sprintf(src, "k"))
	}
}

// rowMax renders dst = the largest src[k] over k in [0, n) (-inf for
// none), in eight partial maxima, which g++ vectorises (maxps); one
// serial float max it does not. The maximum is exact, so the order does
// not change it; a NaN is skipped either way (s > m is false).
func (g *cg) rowMax(ind, dst, src string, n int) {
	full := n - n%8
	max2 := func(a, b string) string { return fmt.Sprintf("(%s > %s ? %s : %s)", a, b, a, b) }
	g.f("%sfloat %s_p[8] = {-NGEN_INF, -NGEN_INF, -NGEN_INF, -NGEN_INF, -NGEN_INF, -NGEN_INF, -NGEN_INF, -NGEN_INF};", ind, dst)
	g.f("%sfor (int k0 = 0; k0 < %d; k0 += 8)", ind, full)
	g.f("%s  for (int u = 0; u < 8; ++u) { const float s = %s; %s_p[u] = %s; }", ind, fmt.Sprintf(src, "(k0 + u)"), dst, max2("s", dst+"_p[u]"))
	g.f("%sfor (int u = 0; u < 4; ++u) %s_p[u] = %s;", ind, dst, max2(dst+"_p[u + 4]", dst+"_p[u]"))
	g.f("%sfloat %s = %s;", ind, dst, max2(max2(dst+"_p[1]", dst+"_p[0]"), max2(dst+"_p[3]", dst+"_p[2]")))
	if full < n {
		g.f("%sfor (int k = %d; k < %d; ++k) { const float s = %s; %s = %s; }", ind, full, n, fmt.Sprintf(src, "k"), dst, max2("s", dst))
	}
}

// maskF renders the f32 x where cond holds, else +0, with the emulation's
// bit-mask select (ngen_emu.h's mask0): with a ?: g++ moves x's
// computation (an exp) into a branch and leaves the loop scalar.
func maskF(x, cond string) string {
	return fmt.Sprintf("::ngen_emu::mask0(%s, %s)", cond, x)
}

func attentionFwdFast(g *cg, c *Ctx, v *ir.Value, at func(int, string) string, out string) bool {
	if !attnFastOK(c, v.Args[:3]) {
		return false
	}
	a, _ := attentionDims(v)
	tile := tileFor(a.Dh, v.DType)
	wq, wk, wv := v.Args[0].Shape[2].N, v.Args[1].Shape[2].N, v.Args[2].Shape[2].N
	Tq, Tk, dh, ow := a.Tq, a.Tk, a.Dh, a.D+a.LseW
	half := v.Args[0].DType.IsHalf()
	attnFastOpen(g, c, a, ceilDiv(Tq, tile), 2)
	// The operands' heads: in place (f32), or widened into scratch 2.
	qAt, qld := "&"+at(0, fmt.Sprintf("b * %d + %d + h * %d", Tq*wq, a.QOff, dh)), wq
	kAt, kld := "&"+at(1, fmt.Sprintf("b * %d + %d + h * %d", Tk*wk, a.KOff, dh)), wk
	vAt, vld := "&"+at(2, fmt.Sprintf("b * %d + %d + h * %d", Tk*wv, a.VOff, dh)), wv
	if half {
		g.f("    float *wq = ::ngen_emu::scan_scratch<float>(2, %d), *wk = wq + %d, *wv = wk + %d;", (Tq+2*Tk)*dh, Tq*dh, Tk*dh)
		g.attnWide("wq", Tq, dh, func(r, d string) string {
			return at(0, fmt.Sprintf("(b * %d + %s) * %d + %d + h * %d + %s", Tq, r, wq, a.QOff, dh, d))
		})
		g.attnWide("wk", Tk, dh, func(r, d string) string {
			return at(1, fmt.Sprintf("(b * %d + %s) * %d + %d + h * %d + %s", Tk, r, wk, a.KOff, dh, d))
		})
		g.attnWide("wv", Tk, dh, func(r, d string) string {
			return at(2, fmt.Sprintf("(b * %d + %s) * %d + %d + h * %d + %s", Tk, r, wv, a.VOff, dh, d))
		})
		qAt, qld, kAt, kld, vAt, vld = "wq", dh, "wk", dh, "wv", dh
	}
	// scr0: scores, then unnormalised weights after dropout; scr1: output.
	g.f("    ::ngen_emu::gemm(false, true, %d, %d, %d, %s, %s, %d, %s, %d, 0.0f, scr0, %d);", Tq, Tk, dh, c.Lit(v.Attrs.F), qAt, qld, kAt, kld, Tk)
	g.f("    for (int qi = 0; qi < %d; ++qi) {", Tq)
	g.f("      float *sr = scr0 + qi * %d;", Tk)
	g.f("      for (int kj = 0; kj < %d; ++kj) sr[kj] = (%s) ? sr[kj] : -NGEN_INF;", Tk, attnVisible(v, at, 3, a))
	g.rowMax("      ", "mx", "sr[%s]", Tk)
	g.f("      for (int kj = 0; kj < %d; ++kj) sr[kj] = %s;", Tk, maskF("::ngen_emu::fast_expf(sr[kj] - mx)", "sr[kj] != -NGEN_INF"))
	g.rowSum("      ", "l", "sr[%s]", Tk)
	if v.Attrs.F2 > 0 {
		g.f("      for (int kj = 0; kj < %d; ++kj) sr[kj] *= %s;", Tk, attnKeep(c, v, a))
	}
	g.f("      rows[qi] = l > 0.0f ? 1.0f / l : 0.0f;")
	lse := fmt.Sprintf("l > 0.0f ? mx + %s(l) : NGEN_INF", c.Math("log"))
	if half { // the f32 log-sum-exp's bits in two 16-bit elements
		g.f("      ngen_store_f32_bits(&%s[(b * %d + qi) * %d + %d + 2 * h], %s);", out, Tq, ow, a.D, lse)
	} else {
		g.f("      %s[(b * %d + qi) * %d + %d + h] = %s;", out, Tq, ow, a.D, lse)
	}
	g.f("    }")
	g.f("    ::ngen_emu::gemm(false, false, %d, %d, %d, 1.0f, scr0, %d, %s, %d, 0.0f, scr1, %d);", Tq, dh, Tk, Tk, vAt, vld, dh)
	g.f("    for (int qi = 0; qi < %d; ++qi)", Tq)
	// A 16-bit result rounds here, once (the element type's conversion).
	g.f("      for (int d = 0; d < %d; ++d) %s[(b * %d + qi) * %d + h * %d + d] = scr1[qi * %d + d] * rows[qi];", dh, out, Tq, ow, dh, dh)
	attnFastClose(g)
	return true
}

func attentionBwdFast(g *cg, c *Ctx, v *ir.Value, at func(int, string) string, out string) bool {
	if !attnFastOK(c, v.Args[1:4]) || v.Args[0].DType != v.Args[1].DType || v.Args[4].DType != v.Args[1].DType {
		return false
	}
	f := bwdView(v)
	a, _ := attentionDims(f)
	tile := tileFor(a.Dh, v.DType)
	nqi, nki := attnItems(v, a, tile)
	gO, q, k, val, res := v.Args[0], v.Args[1], v.Args[2], v.Args[3], v.Args[4]
	gw, wq, wk, wv, ws, rw := gO.Shape[2].N, q.Shape[2].N, k.Shape[2].N, val.Shape[2].N, v.Shape[2].N, res.Shape[2].N
	Tq, Tk, dh := a.Tq, a.Tk, a.Dh
	m := v.Attrs.Ints[5]
	half := q.DType.IsHalf()
	vis := attnVisible(f, func(i int, idx string) string { return at(i+2, idx) }, 3, a)
	qAt, qld := "&"+at(1, fmt.Sprintf("b * %d + %d + h * %d", Tq*wq, a.QOff, dh)), wq
	kAt, kld := "&"+at(2, fmt.Sprintf("b * %d + %d + h * %d", Tk*wk, a.KOff, dh)), wk
	vAt, vld := "&"+at(3, fmt.Sprintf("b * %d + %d + h * %d", Tk*wv, a.VOff, dh)), wv
	gAt, gld := "&"+at(0, fmt.Sprintf("b * %d + h * %d", Tq*gw, dh)), gw
	lse := at(4, fmt.Sprintf("row + %d + h", a.D))
	wat := widen(v, at)
	attnFastOpen(g, c, a, nqi+nki, 2)
	if half {
		// The head's q, k, v and dO widened (scratch 2), and the f32
		// gradient each GEMM forms before its one rounding to 16 bits.
		g.f("    float *wq = ::ngen_emu::scan_scratch<float>(2, %d), *wk = wq + %d, *wv = wk + %d, *wg = wv + %d, *wo = wg + %d;",
			(2*Tq+2*Tk+max(Tq, Tk))*dh, Tq*dh, Tk*dh, Tk*dh, Tq*dh)
		for _, w := range []struct {
			dst       string
			arg, rows int
			width     int
			off       int
		}{{"wq", 1, Tq, wq, a.QOff}, {"wk", 2, Tk, wk, a.KOff}, {"wv", 3, Tk, wv, a.VOff}, {"wg", 0, Tq, gw, 0}} {
			g.attnWide(w.dst, w.rows, dh, func(r, d string) string {
				return at(w.arg, fmt.Sprintf("(b * %d + %s) * %d + %d + h * %d + %s", w.rows, r, w.width, w.off, dh, d))
			})
		}
		qAt, qld, kAt, kld, vAt, vld, gAt, gld = "wq", dh, "wk", dh, "wv", dh, "wg", dh
		lse = fmt.Sprintf("ngen_load_f32_bits(&%s)", at(4, fmt.Sprintf("row + %d + 2 * h", a.D)))
	}
	// scr0: scores, then the weights after dropout (pd); scr1: dO·Vᵀ,
	// then the scores' gradient without the scale (ds).
	g.f("    ::ngen_emu::gemm(false, true, %d, %d, %d, %s, %s, %d, %s, %d, 0.0f, scr0, %d);", Tq, Tk, dh, c.Lit(f.Attrs.F), qAt, qld, kAt, kld, Tk)
	g.f("    ::ngen_emu::gemm(false, true, %d, %d, %d, 1.0f, %s, %d, %s, %d, 0.0f, scr1, %d);", Tq, Tk, dh, gAt, gld, vAt, vld, Tk)
	g.f("    for (int qi = 0; qi < %d; ++qi) {", Tq)
	g.f("      const long long row = (b * %d + qi) * %d;", Tq, rw)
	g.rowSum("      ", "dd", fmt.Sprintf("%s * %s", wat(0, fmt.Sprintf("(b * %d + qi) * %d + h * %d + %%[1]s", Tq, gw, dh)), wat(4, fmt.Sprintf("row + h * %d + %%[1]s", dh))), dh)
	g.f("      const float lse = %s;", lse)
	g.f("      float *sr = scr0 + qi * %d, *dr = scr1 + qi * %d;", Tk, Tk)
	g.f("      for (int kj = 0; kj < %d; ++kj) {", Tk)
	g.f("        const float p = %s;", maskF("::ngen_emu::fast_expf(sr[kj] - lse)", "("+vis+") && lse != NGEN_INF"))
	if f.Attrs.F2 > 0 {
		g.f("        const float z = %s;", attnKeep(c, f, a))
		g.f("        sr[kj] = p * z;")
		g.f("        dr[kj] = p * (dr[kj] * z - dd);")
	} else {
		g.f("        sr[kj] = p;")
		g.f("        dr[kj] = p * (dr[kj] - dd);")
	}
	g.f("      }")
	g.f("    }")
	// grad renders one gradient's GEMM: into out in place (f32), or into
	// the f32 scratch wo, then rounded into out.
	grad := func(ta bool, rows, off int, alpha, a1 string, lda int, b1 string, ldb int) {
		dst := fmt.Sprintf("&%s[b * %d + %d + h * %d]", out, rows*ws, off, dh)
		if !half {
			g.f("    ::ngen_emu::gemm(%v, false, %d, %d, %d, %s, %s, %d, %s, %d, 0.0f, %s, %d);", ta, rows, dh, Tq+Tk-rows, alpha, a1, lda, b1, ldb, dst, ws)
			return
		}
		g.f("    ::ngen_emu::gemm(%v, false, %d, %d, %d, %s, %s, %d, %s, %d, 0.0f, wo, %d);", ta, rows, dh, Tq+Tk-rows, alpha, a1, lda, b1, ldb, dh)
		g.f("    for (int r = 0; r < %d; ++r)", rows)
		g.f("      for (int d = 0; d < %d; ++d) %s[(b * %d + r) * %d + %d + h * %d + d] = wo[r * %d + d];", dh, out, rows, ws, off, dh, dh)
	}
	if m&1 != 0 { // dq = scale · ds · k
		grad(false, Tq, a.QOff, c.Lit(f.Attrs.F), "scr1", Tk, kAt, kld)
	}
	if m&2 != 0 { // dk = scale · dsᵀ · q
		grad(true, Tk, a.KOff, c.Lit(f.Attrs.F), "scr1", Tk, qAt, qld)
	}
	if m&4 != 0 { // dv = pdᵀ · dO
		grad(true, Tk, a.VOff, "1.0f", "scr0", Tk, gAt, gld)
	}
	attnFastClose(g)
	return true
}
