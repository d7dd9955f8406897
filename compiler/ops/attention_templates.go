package ops

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// The kernels of attention and attention_bwd (attention.go), written for
// the GPU and run as written by the CPU emulation:
//
//   - a block per work item, (batch, head, tile of queries) forward; the
//     tiles of queries, keys, values and the running output sit in shared
//     memory, and each warp takes rows of the query tile: its lanes score
//     the keys of the current key tile, combine max and sum by warp
//     butterflies, and update the row's running max, sum and output
//     (online softmax). The scores of a key tile live in a per-warp row
//     of shared memory while the warp uses them; nothing T×T is stored;
//   - backward, query-tile items accumulate dq over the key tiles and
//     key-tile items accumulate dk and dv over the query tiles, each
//     recomputing the weights from the stored log-sum-exp, with
//     D_i = Σ dO_i·O_i for the softmax's gradient.
//
// A block of one thread (the CPU backend's launch of Loop kernels) is one
// "warp" of one lane, which runs the same loops without the butterflies.

// tileFor is the rows per tile for head size dh: as many as keep the six
// tiles of the backward kernel within 40 KB of static shared memory, at
// most 32 (a lane per row or key). 0 when not even one row fits.
func tileFor(dh int, dt ir.DType) int {
	size, ld := dt.Size(), rowStride(dh)
	if dt.IsHalf() {
		size = 4 // the tiles hold the float a 16-bit element widens to
	}
	for t := 32; t >= 1; t /= 2 {
		if 6*t*ld*size+10*t*size <= 40960 {
			return t
		}
	}
	return 0
}

// rowStride is the distance between rows of a tile in shared memory: dh
// made odd, so the lanes of a warp that read one column of 32 rows (the
// scores' dot products) hit 32 different banks.
func rowStride(dh int) int { return dh | 1 }

// attnWarps is the most warps a block gives to rows.
const attnWarps = 4

// dots renders dot products over d in [0, n) into fresh variables:
// names[k] = Σ_d a_k(d)·b_k(d). Each sum runs in eight partial sums (d
// mod 8), added pairwise at the end: the CPU emulation's compiler turns
// them into vector instructions, which a single serial sum (a float
// reduction it may not reorder) never becomes; the GPU keeps them in
// registers.
func (g *cg) dots(ind, T, zero string, n int, names []string, a, b []func(d string) string) {
	const p = 8
	full := n - n%p
	if full == 0 {
		for _, nm := range names {
			g.f("%s%s %s = %s;", ind, T, nm, zero)
		}
	} else {
		zs := strings.TrimSuffix(strings.Repeat(zero+", ", p), ", ")
		for _, nm := range names {
			g.f("%s%s %s_p[%d] = {%s};", ind, T, nm, p, zs)
		}
		g.f("%sfor (int d0 = 0; d0 < %d; d0 += %d)", ind, full, p)
		g.f("%s  for (int u = 0; u < %d; ++u) {", ind, p)
		g.f("%s    const int d = d0 + u;", ind)
		for k, nm := range names {
			g.f("%s    %s_p[u] += %s * %s;", ind, nm, a[k]("d"), b[k]("d"))
		}
		g.f("%s  }", ind)
		for _, nm := range names {
			g.f("%s%s %s = ((%s_p[0] + %s_p[1]) + (%s_p[2] + %s_p[3])) + ((%s_p[4] + %s_p[5]) + (%s_p[6] + %s_p[7]));", ind, T, nm, nm, nm, nm, nm, nm, nm, nm, nm)
		}
	}
	if full < n {
		g.f("%sfor (int d = %d; d < %d; ++d) {", ind, full, n)
		for k, nm := range names {
			g.f("%s  %s += %s * %s;", ind, nm, a[k]("d"), b[k]("d"))
		}
		g.f("%s}", ind)
	}
}

// sh returns the accessor of row r of shared tile t: t[r * ld + d].
func sh(t, r string, ld int) func(string) string {
	return func(d string) string { return fmt.Sprintf("%s[%s * %d + %s]", t, r, ld, d) }
}

// attnCommon renders the lane geometry and the item decomposition shared
// by both kernels.
func (g *cg) attnLanes() {
	g.f("const int nl = blockDim.x >= 32 ? 32 : 1;")
	g.f("const int nw = (int)blockDim.x / nl < %d ? (int)blockDim.x / nl : %d;", attnWarps, attnWarps)
	g.f("const int lane = (int)threadIdx.x %% nl, w = (int)threadIdx.x / nl;")
}

// kend renders kend, the end of the keys a query tile [i0, i0+nq)
// visits: all Tk, or under a causal mask the keys up to its last query.
func (g *cg) kend(ind string, v *ir.Value, a attnDims, comment string) {
	if v.Attrs.Str == "causal" {
		g.f("%sconst int kend = i0 + nq < %d ? i0 + nq : %d;%s", ind, a.Tk, a.Tk, comment)
	} else {
		g.f("%sconst int kend = %d;", ind, a.Tk)
	}
}

// attnMask renders the condition that key kj is visible to query qi.
func attnVisible(v *ir.Value, at func(int, string) string, kpmArg int, a attnDims) string {
	cond := "true"
	if v.Attrs.Str == "causal" {
		cond += " && kj <= qi"
	}
	if len(v.Args) > kpmArg {
		cond += fmt.Sprintf(" && %s == 0", at(kpmArg, fmt.Sprintf("b * %d + kj", a.Tk)))
	}
	return cond
}

// attnKeep renders the dropout factor z of weight (qi, kj): 1/(1-p) where
// kept, 0 where dropped, 1 in eval mode or without dropout.
func attnKeep(c *Ctx, v *ir.Value, a attnDims) string {
	p := v.Attrs.F2
	if p == 0 {
		return c.Lit(1)
	}
	// The index an unfused dropout over the [B,H,Tq,Tk] weights draws
	// at: the element's index in the global batch (sampleIndex).
	ci := *c
	ci.Index = fmt.Sprintf("(((b * %d + h) * %d + qi) * %d + kj)", a.H, a.Tq, a.Tk)
	idx := sampleIndex(&ci, ir.Shape{a.B, ir.D(a.H), ir.D(a.Tq), ir.D(a.Tk)})
	return dropoutFactor(c, v.Attrs.I, idx, p)
}

func attentionFwdBlocks(v *ir.Value) ir.Shape {
	a, _ := attentionDims(v)
	t := tileFor(a.Dh, v.DType)
	return ir.Shape{a.B, ir.D(a.H * ceilDiv(a.Tq, t))}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func attentionFwdLoop(c *Ctx, v *ir.Value, at func(int, string) string, out string) string {
	a, _ := attentionDims(v)
	T, dh, tile := c.T, a.Dh, tileFor(a.Dh, v.DType)
	ld := rowStride(dh)
	nqb := ceilDiv(a.Tq, tile)
	wq, wk, wv := v.Args[0].Shape[2].N, v.Args[1].Shape[2].N, v.Args[2].Shape[2].N
	g := &cg{}
	if c.Target == Host && attentionFwdFast(g, c, v, at, out) {
		return g.b.String()
	}
	// The baseline target renders the same text as the CUDA form (so the
	// host glue keeps one copy): NGEN_WMMA16 is defined only where the
	// GPU forms run as written.
	mma := c.Target != Host && c.TensorCores && mmaFwdTile(v) > 0
	if mma {
		g.f("#ifdef NGEN_WMMA16")
		g.b.WriteString(attentionFwdMMA(c, v, at, out))
		g.f("#else")
	}
	at = widen(v, at)
	g.f("__shared__ %s sQ[%d], sK[%d], sV[%d], sO[%d];", T, tile*ld, tile*ld, tile*ld, tile*ld)
	g.f("__shared__ %s sS[%d], sM[%d], sL[%d];", T, attnWarps*tile, tile, tile)
	g.attnLanes()
	g.f("const long long nitems = %s * %d;", c.Dim(a.B), a.H*nqb)
	g.f("for (long long it = blockIdx.x; it < nitems; it += gridDim.x) {")
	g.f("  const long long b = it / %d;", a.H*nqb)
	g.f("  const int h = (int)(it / %d %% %d), i0 = (int)(it %% %d) * %d;", nqb, a.H, nqb, tile)
	g.f("  const int nq = %d - i0 < %d ? %d - i0 : %d;", a.Tq, tile, a.Tq, tile)
	g.f("  for (int e = threadIdx.x; e < %d; e += blockDim.x) {", tile*dh)
	g.f("    const int i = e / %d, d = e %% %d;", dh, dh)
	g.f("    sQ[i * %d + d] = i < nq ? %s : %s;", ld, at(0, fmt.Sprintf("(b * %d + i0 + i) * %d + %d + h * %d + d", a.Tq, wq, a.QOff, dh)), c.Lit(0))
	g.f("    sO[i * %d + d] = %s;", ld, c.Lit(0))
	g.f("  }")
	g.f("  for (int i = threadIdx.x; i < %d; i += blockDim.x) { sM[i] = -NGEN_INF; sL[i] = %s; }", tile, c.Lit(0))
	g.f("  __syncthreads();")
	g.kend("  ", v, a, " // later keys are masked for every query of the tile")
	g.f("  for (int j0 = 0; j0 < kend; j0 += %d) {", tile)
	g.f("    const int nk = %d - j0 < %d ? %d - j0 : %d;", a.Tk, tile, a.Tk, tile)
	g.f("    for (int e = threadIdx.x; e < %d; e += blockDim.x) {", tile*dh)
	g.f("      const int j = e / %d, d = e %% %d;", dh, dh)
	g.f("      sK[j * %d + d] = j < nk ? %s : %s;", ld, at(1, fmt.Sprintf("(b * %d + j0 + j) * %d + %d + h * %d + d", a.Tk, wk, a.KOff, dh)), c.Lit(0))
	g.f("      sV[j * %d + d] = j < nk ? %s : %s;", ld, at(2, fmt.Sprintf("(b * %d + j0 + j) * %d + %d + h * %d + d", a.Tk, wv, a.VOff, dh)), c.Lit(0))
	g.f("    }")
	g.f("    __syncthreads();")
	g.f("    for (int i = w; w < nw && i < nq; i += nw) {")
	g.f("      const int qi = i0 + i; (void)qi;")
	g.f("      %s mx = -NGEN_INF;", T)
	g.f("      for (int j = lane; j < %d; j += nl) {", tile)
	g.f("        const int kj = j0 + j; (void)kj;")
	g.f("        %s s = -NGEN_INF;", T)
	g.f("        if (j < nk && %s) {", attnVisible(v, at, 3, a))
	g.dots("          ", T, c.Lit(0), dh, []string{"acc"}, []func(string) string{sh("sQ", "i", ld)}, []func(string) string{sh("sK", "j", ld)})
	g.f("          s = acc * %s;", c.Lit(v.Attrs.F))
	g.f("        }")
	g.f("        sS[w * %d + j] = s;", tile)
	g.f("        mx = s > mx ? s : mx;")
	g.f("      }")
	g.f("      if (nl > 1) mx = ngen_warp_max(mx);")
	g.f("      const %s mold = sM[i], mnew = mold > mx ? mold : mx;", T)
	g.f("      %s ls = %s;", T, c.Lit(0))
	g.f("      for (int j = lane; j < %d; j += nl) {", tile)
	g.f("        const int kj = j0 + j; (void)kj;")
	g.f("        const %s s = sS[w * %d + j];", T, tile)
	g.f("        const %s p = s == -NGEN_INF ? %s : %s(s - mnew);", T, c.Lit(0), c.Math("exp"))
	g.f("        ls += p;")
	g.f("        sS[w * %d + j] = p * %s;", tile, attnKeep(c, v, a))
	g.f("      }")
	g.f("      if (nl > 1) { ls = ngen_warp_sum(ls); __syncwarp(); }")
	g.f("      const %s alpha = mold == -NGEN_INF ? %s : %s(mold - mnew);", T, c.Lit(0), c.Math("exp"))
	// One lane (the CPU's solo blocks) walks the keys outside and d
	// inside, which vectorises; lanes split d. Each element sees the same
	// operations in the same order either way.
	g.f("      if (nl == 1) {")
	g.f("        for (int d = 0; d < %d; ++d) sO[i * %d + d] *= alpha;", dh, ld)
	g.f("        for (int j = 0; j < nk; ++j) {")
	g.f("          const %s p = sS[w * %d + j];", T, tile)
	g.f("          for (int d = 0; d < %d; ++d) sO[i * %d + d] += p * sV[j * %d + d];", dh, ld, ld)
	g.f("        }")
	g.f("      } else {")
	g.f("        for (int d = lane; d < %d; d += nl) {", dh)
	g.f("          %s acc = sO[i * %d + d] * alpha;", T, ld)
	g.f("          for (int j = 0; j < nk; ++j) acc += sS[w * %d + j] * sV[j * %d + d];", tile, ld)
	g.f("          sO[i * %d + d] = acc;", ld)
	g.f("        }")
	g.f("      }")
	g.f("      if (nl > 1) __syncwarp();")
	g.f("      if (lane == 0) { sM[i] = mnew; sL[i] = sL[i] * alpha + ls; }")
	g.f("    }")
	g.f("    __syncthreads();")
	g.f("  }")
	g.f("  for (int i = w; w < nw && i < nq; i += nw) {")
	g.f("    const long long row = (b * %d + i0 + i) * %d;", a.Tq, a.D+a.LseW)
	g.f("    const %s l = sL[i], inv = l > %s ? %s / l : %s;", T, c.Lit(0), c.Lit(1), c.Lit(0))
	g.f("    for (int d = lane; d < %d; d += nl) %s[row + h * %d + d] = sO[i * %d + d] * inv;", dh, out, dh, ld)
	lse := fmt.Sprintf("l > %s ? sM[i] + %s(l) : NGEN_INF", c.Lit(0), c.Math("log"))
	if v.DType.IsHalf() {
		g.f("    if (lane == 0) ngen_store_f32_bits(&%s[row + %d + 2 * h], %s);", out, a.D, lse)
	} else {
		g.f("    if (lane == 0) %s[row + %d + h] = %s;", out, a.D, lse)
	}
	g.f("  }")
	g.f("  __syncthreads();")
	g.f("}")
	if mma {
		g.f("#endif")
	}
	return g.b.String()
}

// widen makes at's loads of 16-bit operands floats: a 16-bit element
// converts to float and back, so mixing one with a float in ?: or an
// arithmetic operator is ambiguous C++. f32 and f64 loads are unchanged.
func widen(v *ir.Value, at func(int, string) string) func(int, string) string {
	return func(i int, idx string) string {
		if v.Args[i].DType.IsHalf() {
			return "(float)" + at(i, idx)
		}
		return at(i, idx)
	}
}

// attnItems are the backward kernel's items per (batch, head): query
// tiles when the source is q, key tiles when it is k or v.
func attnItems(v *ir.Value, a attnDims, tile int) (nq, nk int) {
	m := v.Attrs.Ints[5]
	if m&1 != 0 {
		nq = ceilDiv(a.Tq, tile)
	}
	if m&6 != 0 {
		nk = ceilDiv(a.Tk, tile)
	}
	return nq, nk
}

func attentionBwdBlocks(v *ir.Value) ir.Shape {
	f := bwdView(v)
	a, _ := attentionDims(f)
	nq, nk := attnItems(v, a, tileFor(a.Dh, v.DType))
	return ir.Shape{a.B, ir.D(a.H * (nq + nk))}
}

func attentionBwdLoop(c *Ctx, v *ir.Value, at func(int, string) string, out string) string {
	f := bwdView(v)
	a, _ := attentionDims(f)
	T, dh, tile := c.T, a.Dh, tileFor(a.Dh, v.DType)
	ld := rowStride(dh)
	nqi, nki := attnItems(v, a, tile)
	per := nqi + nki
	gO, q, k, val, res := v.Args[0], v.Args[1], v.Args[2], v.Args[3], v.Args[4]
	gw, wq, wk, wv, ws := gO.Shape[2].N, q.Shape[2].N, k.Shape[2].N, val.Shape[2].N, v.Shape[2].N
	rw := res.Shape[2].N
	m := v.Attrs.Ints[5]
	causal := v.Attrs.Str == "causal"
	// bwd operands: gO 0, q 1, k 2, v 3, out 4, kpm 5.
	vis := attnVisible(f, func(i int, idx string) string { return at(i+2, idx) }, 3, a)
	g := &cg{}
	if c.Target == Host && attentionBwdFast(g, c, v, at, out) {
		return g.b.String()
	}
	mma := c.Target != Host && c.TensorCores && mmaBwdOK(v) // as forward
	if mma {
		g.f("#ifdef NGEN_WMMA16")
		g.b.WriteString(attentionBwdMMA(c, v, at, out))
		g.f("#else")
	}
	raw := at
	at = widen(v, at)
	lseAt := at(4, "row + "+itoa(a.D)+" + h")
	if res.DType.IsHalf() {
		lseAt = fmt.Sprintf("ngen_load_f32_bits(&%s)", raw(4, "row + "+itoa(a.D)+" + 2 * h"))
	}
	g.f("__shared__ %s sQ[%d], sdO[%d], sK[%d], sV[%d], sA[%d];", T, tile*ld, tile*ld, tile*ld, tile*ld, tile*ld)
	g.f("__shared__ %s sS[%d], sLse[%d], sDd[%d];", T, attnWarps*tile, tile, tile)
	if nki > 0 { // dv's accumulator and the weights
		g.f("__shared__ %s sB[%d], sP[%d];", T, tile*ld, attnWarps*tile)
	}
	g.attnLanes()
	loadQ := func(ind string) {
		g.f("%s  const int nq = %d - i0 < %d ? %d - i0 : %d;", ind, a.Tq, tile, a.Tq, tile)
		g.f("%s  for (int e = threadIdx.x; e < %d; e += blockDim.x) {", ind, tile*dh)
		g.f("%s    const int i = e / %d, d = e %% %d;", ind, dh, dh)
		g.f("%s    sQ[i * %d + d] = i < nq ? %s : %s;", ind, ld, at(1, fmt.Sprintf("(b * %d + i0 + i) * %d + %d + h * %d + d", a.Tq, wq, a.QOff, dh)), c.Lit(0))
		g.f("%s    sdO[i * %d + d] = i < nq ? %s : %s;", ind, ld, at(0, fmt.Sprintf("(b * %d + i0 + i) * %d + h * %d + d", a.Tq, gw, dh)), c.Lit(0))
		g.f("%s  }", ind)
		g.f("%s  __syncthreads();", ind)
		// D_i = Σ dO·O, and the log-sum-exp (+inf past the last query,
		// so those rows weigh 0).
		g.f("%s  for (int i = w; w < nw && i < %d; i += nw) {", ind, tile)
		g.f("%s    const long long row = (b * %d + i0 + i) * %d;", ind, a.Tq, rw)
		g.f("%s    %s dd = %s;", ind, T, c.Lit(0))
		g.f("%s    if (i < nq) for (int d = lane; d < %d; d += nl) dd += sdO[i * %d + d] * %s;", ind, dh, ld, at(4, "row + h * "+itoa(dh)+" + d"))
		g.f("%s    if (nl > 1) dd = ngen_warp_sum(dd);", ind)
		g.f("%s    if (lane == 0) { sDd[i] = dd; sLse[i] = i < nq ? %s : NGEN_INF; }", ind, lseAt)
		g.f("%s  }", ind)
		g.f("%s  __syncthreads();", ind)
	}
	loadKV := func(ind string) {
		g.f("%s  const int nk = %d - j0 < %d ? %d - j0 : %d;", ind, a.Tk, tile, a.Tk, tile)
		g.f("%s  for (int e = threadIdx.x; e < %d; e += blockDim.x) {", ind, tile*dh)
		g.f("%s    const int j = e / %d, d = e %% %d;", ind, dh, dh)
		g.f("%s    sK[j * %d + d] = j < nk ? %s : %s;", ind, ld, at(2, fmt.Sprintf("(b * %d + j0 + j) * %d + %d + h * %d + d", a.Tk, wk, a.KOff, dh)), c.Lit(0))
		g.f("%s    sV[j * %d + d] = j < nk ? %s : %s;", ind, ld, at(3, fmt.Sprintf("(b * %d + j0 + j) * %d + %d + h * %d + d", a.Tk, wv, a.VOff, dh)), c.Lit(0))
		g.f("%s  }", ind)
	}
	// grads renders, for query row i and key j of the tiles, the weight
	// after dropout (pd) and the score gradient (ds), without the scale.
	grads := func(ind string, withPD bool) {
		if withPD {
			g.f("%s%s pd = %s, ds = %s;", ind, T, c.Lit(0), c.Lit(0))
		} else {
			g.f("%s%s ds = %s;", ind, T, c.Lit(0))
		}
		g.f("%sif (i < nq && j < nk && %s) {", ind, vis)
		g.dots(ind+"  ", T, c.Lit(0), dh, []string{"s", "dp"}, []func(string) string{sh("sQ", "i", ld), sh("sdO", "i", ld)},
			[]func(string) string{sh("sK", "j", ld), sh("sV", "j", ld)})
		g.f("%s  const %s p = %s(s * %s - sLse[i]), z = %s;", ind, T, c.Math("exp"), c.Lit(v.Attrs.F), attnKeep(c, f, a))
		if withPD {
			g.f("%s  pd = p * z;", ind)
		}
		g.f("%s  ds = p * (dp * z - sDd[i]);", ind)
		g.f("%s}", ind)
	}
	g.f("const long long nitems = %s * %d;", c.Dim(a.B), a.H*per)
	g.f("for (long long it = blockIdx.x; it < nitems; it += gridDim.x) {")
	g.f("  const long long b = it / %d;", a.H*per)
	g.f("  const int h = (int)(it / %d %% %d), x = (int)(it %% %d);", per, a.H, per)
	if nqi > 0 {
		// dq_i = scale · Σ_j ds_ij k_j over the key tiles.
		g.f("  if (x < %d) {", nqi)
		g.f("    const int i0 = x * %d;", tile)
		loadQ("  ")
		g.f("    for (int e = threadIdx.x; e < %d; e += blockDim.x) sA[e] = %s;", tile*ld, c.Lit(0))
		g.kend("    ", v, a, "")
		g.f("    for (int j0 = 0; j0 < kend; j0 += %d) {", tile)
		loadKV("    ")
		g.f("      __syncthreads();")
		g.f("      for (int i = w; w < nw && i < nq; i += nw) {")
		g.f("        const int qi = i0 + i; (void)qi;")
		g.f("        for (int j = lane; j < %d; j += nl) {", tile)
		g.f("          const int kj = j0 + j; (void)kj;")
		grads("          ", false)
		g.f("          sS[w * %d + j] = ds;", tile)
		g.f("        }")
		g.f("        if (nl > 1) __syncwarp();")
		g.f("        if (nl == 1) { // keys outside, d inside: as the forward's output")
		g.f("          for (int j = 0; j < nk; ++j) {")
		g.f("            const %s ds = sS[w * %d + j];", T, tile)
		g.f("            for (int d = 0; d < %d; ++d) sA[i * %d + d] += ds * sK[j * %d + d];", dh, ld, ld)
		g.f("          }")
		g.f("        } else {")
		g.f("          for (int d = lane; d < %d; d += nl) {", dh)
		g.f("            %s acc = sA[i * %d + d];", T, ld)
		g.f("            for (int j = 0; j < nk; ++j) acc += sS[w * %d + j] * sK[j * %d + d];", tile, ld)
		g.f("            sA[i * %d + d] = acc;", ld)
		g.f("          }")
		g.f("        }")
		g.f("        if (nl > 1) __syncwarp();")
		g.f("      }")
		g.f("      __syncthreads();")
		g.f("    }")
		g.f("    for (int e = threadIdx.x; e < nq * %d; e += blockDim.x) {", dh)
		g.f("      const int i = e / %d, d = e %% %d;", dh, dh)
		g.f("      %s[(b * %d + i0 + i) * %d + %d + h * %d + d] = sA[i * %d + d] * %s;", out, a.Tq, ws, a.QOff, dh, ld, c.Lit(v.Attrs.F))
		g.f("    }")
		g.f("    __syncthreads();")
		g.f("    continue;")
		g.f("  }")
	}
	if nki > 0 {
		// dv_j = Σ_i pd_ij dO_i and dk_j = scale · Σ_i ds_ij q_i over the
		// query tiles.
		g.f("  {")
		g.f("    const int j0 = (x - %d) * %d;", nqi, tile)
		loadKV("  ")
		g.f("    for (int e = threadIdx.x; e < %d; e += blockDim.x) { sA[e] = %s; sB[e] = %s; }", tile*ld, c.Lit(0), c.Lit(0))
		g.f("    __syncthreads();")
		if causal {
			g.f("    const int istart = j0; // earlier queries see none of these keys")
		} else {
			g.f("    const int istart = 0;")
		}
		g.f("    for (int i0 = istart; i0 < %d; i0 += %d) {", a.Tq, tile)
		loadQ("    ")
		g.f("      for (int j = w; w < nw && j < nk; j += nw) {")
		g.f("        const int kj = j0 + j; (void)kj;")
		g.f("        for (int i = lane; i < %d; i += nl) {", tile)
		g.f("          const int qi = i0 + i; (void)qi;")
		grads("          ", true)
		g.f("          sP[w * %d + i] = pd; sS[w * %d + i] = ds;", tile, tile)
		g.f("        }")
		g.f("        if (nl > 1) __syncwarp();")
		g.f("        if (nl == 1) { // queries outside, d inside")
		g.f("          for (int i = 0; i < nq; ++i) {")
		g.f("            const %s ds = sS[w * %d + i], pd = sP[w * %d + i];", T, tile, tile)
		g.f("            for (int d = 0; d < %d; ++d) { sA[j * %d + d] += ds * sQ[i * %d + d]; sB[j * %d + d] += pd * sdO[i * %d + d]; }", dh, ld, ld, ld, ld)
		g.f("          }")
		g.f("        } else {")
		g.f("          for (int d = lane; d < %d; d += nl) {", dh)
		g.f("            %s dk = sA[j * %d + d], dv = sB[j * %d + d];", T, ld, ld)
		g.f("            for (int i = 0; i < nq; ++i) { dk += sS[w * %d + i] * sQ[i * %d + d]; dv += sP[w * %d + i] * sdO[i * %d + d]; }", tile, ld, tile, ld)
		g.f("            sA[j * %d + d] = dk; sB[j * %d + d] = dv;", ld, ld)
		g.f("          }")
		g.f("        }")
		g.f("        if (nl > 1) __syncwarp();")
		g.f("      }")
		g.f("      __syncthreads();")
		g.f("    }")
		g.f("    for (int e = threadIdx.x; e < nk * %d; e += blockDim.x) {", dh)
		g.f("      const int j = e / %d, d = e %% %d;", dh, dh)
		g.f("      const long long row = (b * %d + j0 + j) * %d;", a.Tk, ws)
		if m&2 != 0 {
			g.f("      %s[row + %d + h * %d + d] = sA[j * %d + d] * %s;", out, a.KOff, dh, ld, c.Lit(v.Attrs.F))
		}
		if m&4 != 0 {
			g.f("      %s[row + %d + h * %d + d] = sB[j * %d + d];", out, a.VOff, dh, ld)
		}
		g.f("    }")
		g.f("    __syncthreads();")
		g.f("  }")
	}
	g.f("}")
	if mma {
		g.f("#endif")
	}
	return g.b.String()
}
