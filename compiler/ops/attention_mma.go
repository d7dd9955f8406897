package ops

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Attention's tensor-core form: the CUDA form of a 16-bit attention
// (mixed precision) whose head size is a multiple of 16 runs its two
// products per key tile, S = Q·Kᵀ and O += P·V, as 16×16×16 nvcuda::wmma
// tiles with f32 accumulation, and the softmax between them on CUDA
// cores. A block takes 64 queries (4 warps of 16 rows); each warp keeps
// its Q tile and its running output as fragments, stores S to shared
// memory, where its lanes (two a row) mask, scale and exponentiate it into
// the 16-bit weights P (rounded to the operands' type, as flash
// attention's tensor-core kernels and PyTorch's do), and rescales its
// output by the running maximum's change through shared memory (a
// fragment's layout is the hardware's, so rows are only reachable there).
// The row sums stay f32 from the unrounded weights.
//
// Modules compiled for a GPU older than sm_80 (no bf16 wmma) take the
// CUDA-core form beside it (NGEN_WMMA16, preamble_f32bits.cuh); the CPU
// runs this form, with wmma emulated (runtime/cpu/emu), where it runs the
// GPU forms as written (cpu.Options.GPUForms), and the CUDA-core form in
// its other modes. The program's TensorForm (Def.Tensor, Ctx.TensorCores)
// can keep the CUDA-core form everywhere.

const (
	mmaRows  = 16 // a fragment's rows: one warp's queries
	mmaWarps = 4
	mmaQT    = mmaRows * mmaWarps // queries per block
	// mmaShared is the static shared memory the form allows itself
	// (under the 48 KB of static shared memory a block may have).
	mmaShared = 46 << 10
)

// mmaFwdTile is the forward's key tile for v, or 0 when v has no
// tensor-core form: not 16-bit, a head size not a multiple of 16, or no
// tile of 16 keys fitting in mmaShared.
func mmaFwdTile(v *ir.Value) int {
	a, err := attentionDims(v)
	if err != nil || !v.Args[0].DType.IsHalf() || a.Dh%16 != 0 {
		return 0
	}
	for kt := 64; kt >= 16; kt /= 2 {
		if mmaFwdBytes(a.Dh, kt) <= mmaShared {
			return kt
		}
	}
	return 0
}

// mmaFwdBytes is the forward's shared memory for head size dh and key
// tile kt: the per-warp float scratch (S, then the output; the Q tile's
// staging before them), K and V tiles, the per-warp weights, and three
// floats a query.
func mmaFwdBytes(dh, kt int) int {
	ldh, ldS, ldP := dh+8, max(kt, dh)+4, kt+8
	return max(mmaQT*ldh*2, mmaWarps*mmaRows*ldS*4) + 2*kt*ldh*2 + mmaWarps*mmaRows*ldP*2 + 2*mmaQT*4
}

// attentionFwdMMA renders the tensor-core forward (see above).
func attentionFwdMMA(c *Ctx, v *ir.Value, at func(int, string) string, out string) string {
	a, _ := attentionDims(v)
	dh, kt := a.Dh, mmaFwdTile(v)
	ldh, ldS, ldP := dh+8, max(kt, dh)+4, kt+8
	nqb := ceilDiv(a.Tq, mmaQT)
	wq, wk, wv := v.Args[0].Shape[2].N, v.Args[1].Shape[2].N, v.Args[2].Shape[2].N
	H := v.Args[0].DType.StorageCType() // the 16-bit operand type
	scratch := max(mmaQT*ldh*2, mmaWarps*mmaRows*ldS*4)
	g := &cg{}
	g.f("namespace wmma = nvcuda::wmma;")
	g.f("__shared__ __align__(32) unsigned char smem[%d];", mmaFwdBytes(dh, kt))
	g.f("float *const sS = (float *)smem; // per warp [16][%d]: S, then the output", ldS)
	g.f("%s *const sQ = (%s *)smem; // the Q tile's staging, before sS", H, H)
	g.f("%s *const sK = (%s *)(smem + %d), *const sV = sK + %d;", H, H, scratch, kt*ldh)
	g.f("%s *const sP = sV + %d; // per warp [16][%d]: the weights", H, kt*ldh, ldP)
	g.f("float *const sM = (float *)(sP + %d), *const sL = sM + %d;", mmaWarps*mmaRows*ldP, mmaQT)
	g.f("const int w = (int)threadIdx.x / 32, lane = (int)threadIdx.x %% 32;")
	g.f("const int r = lane / 2, hk = lane %% 2; // the row a lane works on, and which of its keys (and columns)")
	g.f("float *const sSw = sS + w * %d;", mmaRows*ldS)
	g.f("%s *const sPw = sP + w * %d;", H, mmaRows*ldP)
	g.f("const %s zero16 = %s(0.f);", H, H)
	g.alignedFlag(at, 0, 1, 2)
	g.f("const long long nitems = %s * %d;", c.Dim(a.B), a.H*nqb)
	g.f("for (long long it = blockIdx.x; it < nitems; it += gridDim.x) {")
	g.f("  const long long b = it / %d;", a.H*nqb)
	g.f("  const int h = (int)(it / %d %% %d), i0 = (int)(it %% %d) * %d;", nqb, a.H, nqb, mmaQT)
	g.f("  const int nq = %d - i0 < %d ? %d - i0 : %d;", a.Tq, mmaQT, a.Tq, mmaQT)
	g.f("  const bool rows = w < %d && w * %d < nq; // the warp has queries", mmaWarps, mmaRows)
	g.stage("  ", "sQ", mmaQT, dh, ldh, "nq", func(idx string) string { return at(0, idx) },
		fmt.Sprintf("(b * %d + i0 + x) * %d + %d + h * %d + d", a.Tq, wq, a.QOff, dh), wq%8 == 0 && a.QOff%8 == 0, "vec")
	g.f("  for (int i = threadIdx.x; i < %d; i += blockDim.x) { sM[i] = -NGEN_INF; sL[i] = 0.f; }", mmaQT)
	g.f("  __syncthreads();")
	g.f("  wmma::fragment<wmma::matrix_a, 16, 16, 16, %s, wmma::row_major> qf[%d];", H, dh/16)
	g.f("  wmma::fragment<wmma::accumulator, 16, 16, 16, float> of[%d];", dh/16)
	g.f("  if (rows)")
	g.f("    for (int kk = 0; kk < %d; ++kk) {", dh/16)
	g.f("      wmma::load_matrix_sync(qf[kk], sQ + w * %d + kk * 16, %d);", mmaRows*ldh, ldh)
	g.f("      wmma::fill_fragment(of[kk], 0.f);")
	g.f("    }")
	g.f("  __syncthreads(); // sQ's bytes become sS")
	g.kend("  ", v, a, " // later keys are masked for every query of the tile")
	g.f("  for (int j0 = 0; j0 < kend; j0 += %d) {", kt)
	g.f("    const int nk = %d - j0 < %d ? %d - j0 : %d;", a.Tk, kt, a.Tk, kt)
	g.stage("    ", "sK", kt, dh, ldh, "nk", func(idx string) string { return at(1, idx) },
		fmt.Sprintf("(b * %d + j0 + x) * %d + %d + h * %d + d", a.Tk, wk, a.KOff, dh), wk%8 == 0 && a.KOff%8 == 0, "vec")
	g.stage("    ", "sV", kt, dh, ldh, "nk", func(idx string) string { return at(2, idx) },
		fmt.Sprintf("(b * %d + j0 + x) * %d + %d + h * %d + d", a.Tk, wv, a.VOff, dh), wv%8 == 0 && a.VOff%8 == 0, "vec")
	g.f("    __syncthreads();")
	g.f("    if (rows) {")
	g.f("      {")
	g.f("        wmma::fragment<wmma::accumulator, 16, 16, 16, float> sf[%d];", kt/16)
	g.f("        wmma::fragment<wmma::matrix_b, 16, 16, 16, %s, wmma::col_major> kf;", H)
	g.f("        for (int n = 0; n < %d; ++n) wmma::fill_fragment(sf[n], 0.f);", kt/16)
	g.f("        for (int kk = 0; kk < %d; ++kk)", dh/16)
	g.f("          for (int n = 0; n < %d; ++n) {", kt/16)
	g.f("            wmma::load_matrix_sync(kf, sK + n * %d + kk * 16, %d);", 16*ldh, ldh)
	g.f("            wmma::mma_sync(sf[n], qf[kk], kf, sf[n]);")
	g.f("          }")
	g.f("        for (int n = 0; n < %d; ++n) wmma::store_matrix_sync(sSw + n * 16, sf[n], %d, wmma::mem_row_major);", kt/16, ldS)
	g.f("      }")
	g.f("      __syncwarp();")
	g.f("      const int i = w * %d + r, qi = i0 + i; (void)qi;", mmaRows)
	g.f("      float mx = -NGEN_INF;")
	g.f("      for (int j = hk; j < %d; j += 2) {", kt)
	g.f("        const int kj = j0 + j; (void)kj;")
	g.f("        float s = -NGEN_INF;")
	g.f("        if (i < nq && j < nk && %s) s = sSw[r * %d + j] * %s;", attnVisible(v, at, 3, a), ldS, c.Lit(v.Attrs.F))
	g.f("        sSw[r * %d + j] = s;", ldS)
	g.f("        mx = s > mx ? s : mx;")
	g.f("      }")
	g.f("      const float mo = __shfl_xor_sync(0xffffffffu, mx, 1);")
	g.f("      mx = mo > mx ? mo : mx;")
	g.f("      const float mold = sM[i], mnew = mold > mx ? mold : mx;")
	g.f("      float ls = 0.f;")
	g.f("      for (int j = hk; j < %d; j += 2) {", kt)
	g.f("        const int kj = j0 + j; (void)kj;")
	g.f("        const float s = sSw[r * %d + j];", ldS)
	g.f("        const float p = s == -NGEN_INF ? 0.f : %s(s - mnew);", c.Math("exp"))
	g.f("        ls += p;")
	g.f("        sPw[r * %d + j] = %s(p * %s);", ldP, H, attnKeep(c, v, a))
	g.f("      }")
	g.f("      ls += __shfl_xor_sync(0xffffffffu, ls, 1);")
	g.f("      const float alpha = mold == -NGEN_INF ? 0.f : %s(mold - mnew);", c.Math("exp"))
	g.f("      __syncwarp(); // every lane has read its scores and both lanes of a row the old maximum")
	g.f("      if (hk == 0) { sM[i] = mnew; sL[i] = sL[i] * alpha + ls; }")
	g.f("      for (int n = 0; n < %d; ++n) wmma::store_matrix_sync(sSw + n * 16, of[n], %d, wmma::mem_row_major);", dh/16, ldS)
	g.f("      __syncwarp();")
	g.f("      for (int d = hk; d < %d; d += 2) sSw[r * %d + d] *= alpha;", dh, ldS)
	g.f("      __syncwarp();")
	g.f("      wmma::fragment<wmma::matrix_a, 16, 16, 16, %s, wmma::row_major> pf;", H)
	g.f("      wmma::fragment<wmma::matrix_b, 16, 16, 16, %s, wmma::row_major> vf;", H)
	g.f("      for (int n = 0; n < %d; ++n) {", dh/16)
	g.f("        wmma::load_matrix_sync(of[n], sSw + n * 16, %d, wmma::mem_row_major);", ldS)
	g.f("        for (int kk = 0; kk < %d; ++kk) {", kt/16)
	g.f("          wmma::load_matrix_sync(pf, sPw + kk * 16, %d);", ldP)
	g.f("          wmma::load_matrix_sync(vf, sV + kk * %d + n * 16, %d);", 16*ldh, ldh)
	g.f("          wmma::mma_sync(of[n], pf, vf, of[n]);")
	g.f("        }")
	g.f("      }")
	g.f("    }")
	g.f("    __syncthreads(); // before the next tile's keys and values")
	g.f("  }")
	g.f("  if (rows) {")
	g.f("    for (int n = 0; n < %d; ++n) wmma::store_matrix_sync(sSw + n * 16, of[n], %d, wmma::mem_row_major);", dh/16, ldS)
	g.f("    __syncwarp();")
	g.f("    const int i = w * %d + r;", mmaRows)
	g.f("    if (i < nq) {")
	g.f("      const long long row = (b * %d + i0 + i) * %d;", a.Tq, a.D+a.LseW)
	g.f("      const float l = sL[i], inv = l > 0.f ? 1.f / l : 0.f;")
	g.f("      for (int d = hk; d < %d; d += 2) %s[row + h * %d + d] = sSw[r * %d + d] * inv;", dh, out, dh, ldS)
	g.f("      if (hk == 0) ngen_store_f32_bits(&%s[row + %d + 2 * h], l > 0.f ? sM[i] + %s(l) : NGEN_INF);", out, a.D, c.Math("log"))
	g.f("    }")
	g.f("  }")
	g.f("  __syncthreads();")
	g.f("}")
	return g.b.String()
}

// The backward's tensor-core form keeps the CUDA-core form's items
// (attentionBwdLoop): a query item (64 queries, a warp's 16 each) sums dq
// over key tiles of mmaInner keys, and a key item (64 keys, a warp's 16)
// sums dk and dv over query tiles of mmaInner queries. Per tile each warp
// computes its scores S and dP = dO·Vᵀ (a key item their transposes, with
// its keys as the rows) as wmma products into shared memory, where its
// lanes form the weight after dropout pd and the score gradient
// ds = p·(dp·z − D_i) in f32 and round them to the 16-bit type for the
// products dq += ds·k, dk += ds·q and dv += pd·dO, as flash attention's
// tensor-core backward does.
const mmaInner = 32

// mmaBwdOK reports whether attention_bwd v has the tensor-core form: a
// 16-bit attention (its incoming gradient in the same type) with a head
// size that is a multiple of 16 and tiles that fit in mmaShared.
func mmaBwdOK(v *ir.Value) bool {
	f := bwdView(v)
	a, err := attentionDims(f)
	if err != nil || !f.Args[0].DType.IsHalf() || v.Args[0].DType != f.Args[0].DType || a.Dh%16 != 0 {
		return false
	}
	return mmaBwdBytes(a.Dh) <= mmaShared
}

// mmaBwdLayout is the backward's shared memory for head size dh: the
// scratch (the item's staging, then per warp S and dP, then the
// gradient's rows), two tiles of the inner kind, per warp two 16-bit
// tiles (ds, and pd), and two floats a row of the item.
func mmaBwdLayout(dh int) (scratch, tiles, halves, stats int) {
	ldh, ldS, ldX := dh+8, mmaInner+4, mmaInner+8
	perWarp := max(2*mmaRows*ldS, mmaRows*(dh+4)) // floats
	scratch = max(2*mmaQT*ldh*2, mmaWarps*perWarp*4)
	tiles = 2 * mmaInner * ldh * 2
	halves = mmaWarps * 2 * mmaRows * ldX * 2
	stats = 2 * mmaQT * 4
	return scratch, tiles, halves, stats
}

func mmaBwdBytes(dh int) int {
	s, t, h, st := mmaBwdLayout(dh)
	return s + t + h + st
}

// attentionBwdMMA renders the tensor-core backward (see above).
func attentionBwdMMA(c *Ctx, v *ir.Value, at func(int, string) string, out string) string {
	f := bwdView(v)
	a, _ := attentionDims(f)
	dh, it := a.Dh, mmaInner
	ldh, ldS, ldX, ldG := dh+8, it+4, it+8, dh+4
	perWarp := max(2*mmaRows*ldS, mmaRows*ldG)
	scratch, tiles, halves, _ := mmaBwdLayout(dh)
	nqi, nki := attnItems(v, a, mmaQT)
	per := nqi + nki
	gO, q, k, val, res := v.Args[0], v.Args[1], v.Args[2], v.Args[3], v.Args[4]
	gw, wq, wk, wv, ws, rw := gO.Shape[2].N, q.Shape[2].N, k.Shape[2].N, val.Shape[2].N, v.Shape[2].N, res.Shape[2].N
	m := v.Attrs.Ints[5]
	causal := v.Attrs.Str == "causal"
	H := q.DType.StorageCType()
	scale := c.Lit(v.Attrs.F)
	vis := attnVisible(f, func(i int, idx string) string { return at(i+2, idx) }, 3, a)
	wide := widen(v, at)
	g := &cg{}
	g.f("namespace wmma = nvcuda::wmma;")
	g.f("__shared__ __align__(32) unsigned char smem[%d];", mmaBwdBytes(dh))
	g.f("%s *const sA = (%s *)smem, *const sB = sA + %d; // the item's 64 rows of two operands, staged", H, H, mmaQT*ldh)
	g.f("float *const sW = (float *)smem + (int)threadIdx.x / 32 * %d; // the warp's S and dP [16][%d], then its gradient rows [16][%d]", perWarp, ldS, ldG)
	g.f("float *const sDp = sW + %d;", mmaRows*ldS)
	g.f("%s *const sT = (%s *)(smem + %d), *const sU = sT + %d; // a tile of the inner kind: keys and values, or queries and dO", H, H, scratch, it*ldh)
	g.f("%s *const sDs = (%s *)(smem + %d) + (int)threadIdx.x / 32 * %d, *const sPd = sDs + %d; // the warp's ds and pd [16][%d]", H, H, scratch+tiles, 2*mmaRows*ldX, mmaRows*ldX, ldX)
	g.f("float *const sDd = (float *)(smem + %d), *const sLse = sDd + %d;", scratch+tiles+halves, mmaQT)
	g.f("const int w = (int)threadIdx.x / 32, lane = (int)threadIdx.x %% 32;")
	g.f("const int r = lane / 2, hk = lane %% 2; // the row a lane works on, and which of its columns")
	g.f("const %s zero16 = %s(0.f);", H, H)
	// stats renders D_i = Σ dO·O and the log-sum-exp of rows [i0, i0+n)
	// of the queries (dO staged in dO16 with stride ldh) into sDd, sLse.
	stats := func(ind, dO16 string, rows int) {
		g.f("%sfor (int i = w; i < %d; i += %d) {", ind, rows, mmaWarps)
		g.f("%s  const long long row = (b * %d + i0 + i) * %d;", ind, a.Tq, rw)
		g.f("%s  float dd = 0.f;", ind)
		g.f("%s  if (i < nq) for (int d = lane; d < %d; d += 32) dd += (float)%s[i * %d + d] * %s;", ind, dh, dO16, ldh, wide(4, "row + h * "+itoa(dh)+" + d"))
		g.f("%s  dd = ngen_warp_sum(dd);", ind)
		g.f("%s  if (lane == 0) { sDd[i] = dd; sLse[i] = i < nq ? ngen_load_f32_bits(&%s) : NGEN_INF; }", ind, at(4, "row + "+itoa(a.D)+" + 2 * h"))
		g.f("%s}", ind)
	}
	// The item's own tiles (once per item) are staged an element at a
	// time: 16 bytes at a time there too made ptxas spill 8 bytes in this
	// kernel at head size 16 on sm_80; the tiles of the inner loop are the
	// ones that count.
	load := func(ind, dst string, rows int, n string, arg int, idx string, aligned bool) {
		g.stage(ind, dst, rows, dh, ldh, n, func(i string) string { return at(arg, i) }, idx, aligned, "vec")
	}
	qAt := fmt.Sprintf("(b * %d + i0 + x) * %d + %d + h * %d + d", a.Tq, wq, a.QOff, dh)
	oAt := fmt.Sprintf("(b * %d + i0 + x) * %d + h * %d + d", a.Tq, gw, dh)
	kAt := fmt.Sprintf("(b * %d + j0 + x) * %d + %d + h * %d + d", a.Tk, wk, a.KOff, dh)
	vAt := fmt.Sprintf("(b * %d + j0 + x) * %d + %d + h * %d + d", a.Tk, wv, a.VOff, dh)
	qAl, oAl := wq%8 == 0 && a.QOff%8 == 0, gw%8 == 0
	kAl, vAl := wk%8 == 0 && a.KOff%8 == 0, wv%8 == 0 && a.VOff%8 == 0
	// products renders a warp's two products of a tile: S (into sW) and
	// dP (into sDp), 16 rows by mmaInner columns, from its row fragments
	// fa, fb and the tile's column operands ta, tb (col_major: their
	// rows are the product's columns).
	products := func(ind, fa, fb, ta, tb string) {
		g.f("%sfor (int n = 0; n < %d; ++n) {", ind, it/16)
		g.f("%s  wmma::fragment<wmma::accumulator, 16, 16, 16, float> s, dp;", ind)
		g.f("%s  wmma::fragment<wmma::matrix_b, 16, 16, 16, %s, wmma::col_major> cb;", ind, H)
		g.f("%s  wmma::fill_fragment(s, 0.f);", ind)
		g.f("%s  wmma::fill_fragment(dp, 0.f);", ind)
		g.f("%s  for (int kk = 0; kk < %d; ++kk) {", ind, dh/16)
		g.f("%s    wmma::load_matrix_sync(cb, %s + n * %d + kk * 16, %d);", ind, ta, 16*ldh, ldh)
		g.f("%s    wmma::mma_sync(s, %s[kk], cb, s);", ind, fa)
		g.f("%s    wmma::load_matrix_sync(cb, %s + n * %d + kk * 16, %d);", ind, tb, 16*ldh, ldh)
		g.f("%s    wmma::mma_sync(dp, %s[kk], cb, dp);", ind, fb)
		g.f("%s  }", ind)
		g.f("%s  wmma::store_matrix_sync(sW + n * 16, s, %d, wmma::mem_row_major);", ind, ldS)
		g.f("%s  wmma::store_matrix_sync(sDp + n * 16, dp, %d, wmma::mem_row_major);", ind, ldS)
		g.f("%s}", ind)
		g.f("%s__syncwarp();", ind)
	}
	// grads renders the lanes' pass over the warp's tile: for query qi
	// (row i of sLse, sDd) and key kj at column y, pd and ds rounded to
	// the 16-bit type.
	grads := func(ind, row, i, valid string, withPD bool) {
		g.f("%sfor (int y = hk; y < %d; y += 2) {", ind, it)
		g.f("%s  %s", ind, row)
		if withPD {
			g.f("%s  float pd = 0.f, ds = 0.f;", ind)
		} else {
			g.f("%s  float ds = 0.f;", ind)
		}
		g.f("%s  if (%s && %s) {", ind, valid, vis)
		g.f("%s    const float p = %s(sW[r * %d + y] * %s - sLse[%s]), z = %s;", ind, c.Math("exp"), ldS, scale, i, attnKeep(c, f, a))
		if withPD {
			g.f("%s    pd = p * z;", ind)
		}
		g.f("%s    ds = p * (sDp[r * %d + y] * z - sDd[%s]);", ind, ldS, i)
		g.f("%s  }", ind)
		g.f("%s  sDs[r * %d + y] = %s(ds);", ind, ldX, H)
		if withPD {
			g.f("%s  sPd[r * %d + y] = %s(pd);", ind, ldX, H)
		}
		g.f("%s}", ind)
		g.f("%s__syncwarp();", ind)
	}
	// acc renders acc[n] += tile16 · op for the warp: tile16 its [16][it]
	// 16-bit rows (stride ldX), op the tile [it][dh] at stride ldh.
	acc := func(ind string, pairs ...[3]string) {
		g.f("%s{", ind)
		g.f("%s  wmma::fragment<wmma::matrix_a, 16, 16, 16, %s, wmma::row_major> ra;", ind, H)
		g.f("%s  wmma::fragment<wmma::matrix_b, 16, 16, 16, %s, wmma::row_major> rb;", ind, H)
		g.f("%s  for (int n = 0; n < %d; ++n)", ind, dh/16)
		g.f("%s    for (int kk = 0; kk < %d; ++kk) {", ind, it/16)
		for _, p := range pairs {
			g.f("%s      wmma::load_matrix_sync(ra, %s + kk * 16, %d);", ind, p[1], ldX)
			g.f("%s      wmma::load_matrix_sync(rb, %s + kk * %d + n * 16, %d);", ind, p[2], 16*ldh, ldh)
			g.f("%s      wmma::mma_sync(%s[n], ra, rb, %s[n]);", ind, p[0], p[0])
		}
		g.f("%s    }", ind)
		g.f("%s}", ind)
	}
	// store renders the warp's rows of gradient fragments acc, times mul,
	// to column col of the source's rows at (b * T + base + row).
	store := func(ind, accName, mul, base string, T, col int) {
		g.f("%sfor (int n = 0; n < %d; ++n) wmma::store_matrix_sync(sW + n * 16, %s[n], %d, wmma::mem_row_major);", ind, dh/16, accName, ldG)
		g.f("%s__syncwarp();", ind)
		g.f("%sif (w * %d + r < %s) {", ind, mmaRows, "nrows")
		g.f("%s  const long long row = (b * %d + %s + w * %d + r) * %d;", ind, T, base, mmaRows, ws)
		g.f("%s  for (int d = hk; d < %d; d += 2) %s[row + %d + h * %d + d] = sW[r * %d + d]%s;", ind, dh, out, col, dh, ldG, mul)
		g.f("%s}", ind)
		g.f("%s__syncwarp();", ind)
	}
	fragArr := func(ind, use, layout, names string, n int) {
		g.f("%swmma::fragment<wmma::%s, 16, 16, 16, %s, wmma::%s> %s;", ind, use, H, layout, fmt.Sprintf(names, n))
	}
	g.alignedFlag(at, 0, 1, 2, 3)
	g.f("const long long nitems = %s * %d;", c.Dim(a.B), a.H*per)
	g.f("for (long long it = blockIdx.x; it < nitems; it += gridDim.x) {")
	g.f("  const long long b = it / %d;", a.H*per)
	g.f("  const int h = (int)(it / %d %% %d), x0 = (int)(it %% %d);", per, a.H, per)
	if nqi > 0 {
		g.f("  if (x0 < %d) { // dq_i = scale · Σ_j ds_ij k_j over the key tiles", nqi)
		g.f("    const int i0 = x0 * %d, nq = %d - i0 < %d ? %d - i0 : %d, nrows = nq;", mmaQT, a.Tq, mmaQT, a.Tq, mmaQT)
		load("    ", "sA", mmaQT, "nq", 1, qAt, false)
		load("    ", "sB", mmaQT, "nq", 0, oAt, false)
		g.f("    __syncthreads();")
		stats("    ", "sB", mmaQT)
		g.f("    const bool rows = w < %d && w * %d < nq;", mmaWarps, mmaRows)
		fragArr("    ", "matrix_a", "row_major", "qf[%d]", dh/16)
		fragArr("    ", "matrix_a", "row_major", "of[%d]", dh/16)
		g.f("    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dq[%d];", dh/16)
		g.f("    if (rows)")
		g.f("      for (int kk = 0; kk < %d; ++kk) {", dh/16)
		g.f("        wmma::load_matrix_sync(qf[kk], sA + w * %d + kk * 16, %d);", mmaRows*ldh, ldh)
		g.f("        wmma::load_matrix_sync(of[kk], sB + w * %d + kk * 16, %d);", mmaRows*ldh, ldh)
		g.f("        wmma::fill_fragment(dq[kk], 0.f);")
		g.f("      }")
		g.f("    __syncthreads(); // the staging's bytes become the warps' scratch")
		g.kend("    ", v, a, "")
		g.f("    for (int j0 = 0; j0 < kend; j0 += %d) {", it)
		g.f("      const int nk = %d - j0 < %d ? %d - j0 : %d;", a.Tk, it, a.Tk, it)
		load("      ", "sT", it, "nk", 2, kAt, kAl)
		load("      ", "sU", it, "nk", 3, vAt, vAl)
		g.f("      __syncthreads();")
		g.f("      if (rows) {")
		products("        ", "qf", "of", "sT", "sU")
		grads("        ", "const int i = w * 16 + r, qi = i0 + i, kj = j0 + y; (void)qi; (void)kj;", "i", "i < nq && y < nk", false)
		acc("        ", [3]string{"dq", "sDs", "sT"})
		g.f("      }")
		g.f("      __syncthreads();")
		g.f("    }")
		g.f("    if (rows) {")
		store("      ", "dq", " * "+scale, "i0", a.Tq, a.QOff)
		g.f("    }")
		g.f("    __syncthreads();")
		g.f("    continue;")
		g.f("  }")
	}
	if nki > 0 {
		g.f("  { // dv_j = Σ_i pd_ij dO_i and dk_j = scale · Σ_i ds_ij q_i over the query tiles")
		g.f("    const int j0 = (x0 - %d) * %d, nk = %d - j0 < %d ? %d - j0 : %d, nrows = nk;", nqi, mmaQT, a.Tk, mmaQT, a.Tk, mmaQT)
		load("    ", "sA", mmaQT, "nk", 2, kAt, false)
		load("    ", "sB", mmaQT, "nk", 3, vAt, false)
		g.f("    __syncthreads();")
		g.f("    const bool rows = w < %d && w * %d < nk;", mmaWarps, mmaRows)
		fragArr("    ", "matrix_a", "row_major", "kf[%d]", dh/16)
		fragArr("    ", "matrix_a", "row_major", "vf[%d]", dh/16)
		g.f("    wmma::fragment<wmma::accumulator, 16, 16, 16, float> dk[%d], dv[%d];", dh/16, dh/16)
		g.f("    if (rows)")
		g.f("      for (int kk = 0; kk < %d; ++kk) {", dh/16)
		g.f("        wmma::load_matrix_sync(kf[kk], sA + w * %d + kk * 16, %d);", mmaRows*ldh, ldh)
		g.f("        wmma::load_matrix_sync(vf[kk], sB + w * %d + kk * 16, %d);", mmaRows*ldh, ldh)
		g.f("        wmma::fill_fragment(dk[kk], 0.f);")
		g.f("        wmma::fill_fragment(dv[kk], 0.f);")
		g.f("      }")
		g.f("    __syncthreads(); // the staging's bytes become the warps' scratch")
		if causal {
			g.f("    const int istart = j0 - j0 %% %d; // earlier queries see none of these keys", it)
		} else {
			g.f("    const int istart = 0;")
		}
		g.f("    for (int i0 = istart; i0 < %d; i0 += %d) {", a.Tq, it)
		g.f("      const int nq = %d - i0 < %d ? %d - i0 : %d;", a.Tq, it, a.Tq, it)
		load("      ", "sT", it, "nq", 1, qAt, qAl)
		load("      ", "sU", it, "nq", 0, oAt, oAl)
		g.f("      __syncthreads();")
		stats("      ", "sU", it)
		g.f("      __syncthreads();")
		g.f("      if (rows) {")
		products("        ", "kf", "vf", "sT", "sU")
		grads("        ", "const int jj = w * 16 + r, kj = j0 + jj, qi = i0 + y; (void)qi; (void)kj;", "y", "jj < nk && y < nq", true)
		acc("        ", [3]string{"dk", "sDs", "sT"}, [3]string{"dv", "sPd", "sU"})
		g.f("      }")
		g.f("      __syncthreads();")
		g.f("    }")
		g.f("    if (rows) {")
		if m&2 != 0 {
			store("      ", "dk", " * "+scale, "j0", a.Tk, a.KOff)
		}
		if m&4 != 0 {
			store("      ", "dv", "", "j0", a.Tk, a.VOff)
		}
		g.f("    }")
		g.f("    __syncthreads();")
		g.f("  }")
	}
	g.f("}")
	return g.b.String()
}

// attentionFwdTensor and attentionBwdTensor are Def.Tensor: the
// tensor-core form's grid, items of 64 rows (the other forms stride over
// it when they run on the CPU).
func attentionFwdTensor(v *ir.Value) (ir.Shape, bool) {
	if mmaFwdTile(v) == 0 {
		return nil, false
	}
	a, _ := attentionDims(v)
	return ir.Shape{a.B, ir.D(a.H * ceilDiv(a.Tq, mmaQT))}, true
}

func attentionBwdTensor(v *ir.Value) (ir.Shape, bool) {
	if !mmaBwdOK(v) {
		return nil, false
	}
	a, _ := attentionDims(bwdView(v))
	nq, nk := attnItems(v, a, mmaQT)
	return ir.Shape{a.B, ir.D(a.H * (nq + nk))}, true
}

// stage renders the copy of a tile of a 16-bit operand into shared
// memory: rows x of dh elements, element d of row x at the operand's
// index idx (in x and d; elem renders the element), into dst[x·ldh + d],
// zeros from row n on. Where every row of the operand starts at a
// multiple of 8 elements (aligned), a thread copies 8 elements (16 bytes)
// at a time if the operand's first element is 16-byte aligned, which the
// kernel tests once (vec, alignedFlag) at run time; otherwise an element
// at a time.
func (g *cg) stage(ind, dst string, rows, dh, ldh int, n string, elem func(idx string) string, idx string, aligned bool, vec string) {
	scalar := func(ind string) {
		g.f("%sfor (int e = threadIdx.x; e < %d; e += blockDim.x) {", ind, rows*dh)
		g.f("%s  const int x = e / %d, d = e %% %d;", ind, dh, dh)
		g.f("%s  %s[x * %d + d] = x < %s ? %s : zero16;", ind, dst, ldh, n, elem(idx))
		g.f("%s}", ind)
	}
	if !aligned {
		scalar(ind)
		return
	}
	g.f("%sif (%s) {", ind, vec)
	g.f("%s  for (int e = threadIdx.x; e < %d; e += blockDim.x) {", ind, rows*dh/8)
	g.f("%s    const int x = e / %d, d = e %% %d * 8;", ind, dh/8, dh/8)
	g.f("%s    ngen_copy16_if(&%s[x * %d + d], &%s, x < %s);", ind, dst, ldh, elem(idx), n)
	g.f("%s  }", ind)
	g.f("%s} else {", ind)
	scalar(ind + "  ")
	g.f("%s}", ind)
}

// alignedFlag renders vec: whether the first elements of the arguments
// in args are all 16-byte aligned (stage's condition), tested once. One
// flag, not one per argument: a predicate register each made ptxas spill
// the backward kernel at head size 16 (sm_80).
func (g *cg) alignedFlag(at func(int, string) string, args ...int) {
	var addrs []string
	for _, i := range args {
		addrs = append(addrs, "(unsigned long long)&"+at(i, "0"))
	}
	g.f("const bool vec = ((%s) & 15) == 0;", strings.Join(addrs, " | "))
}
