package ops

import (
	"github.com/ngen-ml/ngen/compiler/ir"
)

// The HostBaseline target's form of rnn_scan and rnn_scan_bwd, for the
// CPU backend's one-thread blocks under cpu.Options.Baseline. A block per
// sequence reads all of W_hh at every step for one sequence: on a CPU that is a matrix-vector product per
// sequence, bound by memory and by scalar dot products. Here a block
// takes a tile of soloTile sequences and keeps their states interleaved
// ([unit][sequence]), so each element of W_hh is loaded once per tile and
// multiplies a short vector of states that the host compiler vectorises.
// Its arithmetic follows the GPU form's step for step (no FMA
// contraction, which the Host target's GEMM form uses where the host has
// it), so the GPU-forms tests compare the two bit for bit on any host.
// The GPU form still runs on the CPU under cpu.Options.GPUBlocks, which
// launches the real block shape.

// soloTile is the sequences per one-thread block.
const soloTile = 8

func scanFwdSolo(g *cg, c *Ctx, v *ir.Value, at func(int, string) string, out string) {
	cell := Cells[v.Attrs.Str]
	xp, whh := v.Args[0], v.Args[1]
	B, T, H := xp.Shape[0], xp.Shape[1].N, whh.Shape[1].N
	G, W, S := cell.Gates, cell.Width*H, soloTile
	t := c.T
	masked := len(v.Args) > 4
	g.f("  __shared__ %s th[%d];", t, S*H)
	if G == 4 {
		g.f("  __shared__ %s tcs[%d];", t, S*H)
	}
	g.f("  const long long nb = %s;", c.Dim(B))
	g.f("  for (long long b0 = (long long)blockIdx.x * %d; b0 < nb; b0 += (long long)gridDim.x * %d) {", S, S)
	// Rows past the batch compute on the tile's first sequence and are
	// not stored, so every tile runs the same vector loop.
	g.f("    const int ns = nb - b0 < %d ? (int)(nb - b0) : %d;", S, S)
	g.f("    for (int s = 0; s < %d; ++s) {", S)
	g.f("      const long long b = b0 + (s < ns ? s : 0);")
	g.f("      for (int j = 0; j < %d; ++j) {", H)
	g.f("        th[j * %d + s] = %s;", S, at(2, "b * "+itoa(H)+" + j"))
	if G == 4 {
		g.f("        tcs[j * %d + s] = %s;", S, at(3, "b * "+itoa(H)+" + j"))
	}
	g.f("      }")
	g.f("    }")
	g.f("    for (int t = 0; t < %d; ++t) {", T)
	g.f("      for (int j = 0; j < %d; ++j) {", H)
	// GCC vector types keep the tile's accumulators in registers (arrays
	// of them went through memory at every k).
	g.f("        typedef %s tile_v __attribute__((vector_size(%d * sizeof(%s))));", t, S, t)
	for q := 0; q < G; q++ {
		g.f("        tile_v a%d;", q)
	}
	g.f("        for (int s = 0; s < %d; ++s) {", S)
	g.f("          const long long xo = ((b0 + (s < ns ? s : 0)) * %d + t) * %d;", T, G*H)
	for q := 0; q < G; q++ {
		g.f("          a%d[s] = %s;", q, at(0, "xo + "+itoa(q*H)+" + j"))
	}
	g.f("        }")
	g.f("        for (int k = 0; k < %d; ++k) {", H)
	for q := 0; q < G; q++ {
		g.f("          const %s w%d = %s;", t, q, at(1, "(long long)("+itoa(q*H)+" + j) * "+itoa(H)+" + k"))
	}
	g.f("          tile_v hk;")
	g.f("          __builtin_memcpy(&hk, th + k * %d, sizeof hk);", S)
	for q := 0; q < G; q++ {
		g.f("          a%d += w%d * hk;", q, q)
	}
	g.f("        }")
	g.f("        for (int s = 0; s < ns; ++s) {")
	g.f("          const long long b = b0 + s;")
	g.f("          %s *o = %s + (b * %d + t) * %d;", t, out, T, W)
	if masked {
		g.f("          const %s hp = th[j * %d + s];", t, S)
	}
	keep := func(x, prev string) string {
		if !masked {
			return x
		}
		return "(on ? " + x + " : " + prev + ")"
	}
	if masked {
		g.f("          const bool on = %s != 0;", at(4, "b * "+itoa(T)+" + t"))
	}
	switch cell.Name {
	case "rnn_tanh":
		g.f("          o[j] = %s;", keep(c.Math("tanh")+"(a0[s])", "hp"))
	case "rnn_relu":
		g.f("          o[j] = %s;", keep("(a0[s] > "+c.Lit(0)+" ? a0[s] : "+c.Lit(0)+")", "hp"))
	case "lstm":
		g.f("          const %s cp = tcs[j * %d + s];", t, S)
		tanh := func(x string) string { return c.Math("tanh") + "(" + x + ")" }
		lstmForward(g, "          ", t, "o", "o_", H, [4]string{sigmoid(c, "a0[s]"), sigmoid(c, "a1[s]"), tanh("a2[s]"), sigmoid(c, "a3[s]")}, tanh, "cp", "hp", keep)
	}
	g.f("        }")
	g.f("      }")
	// The new states, once every unit has read the old ones.
	g.f("      for (int s = 0; s < ns; ++s) {")
	g.f("        const %s *o = %s + ((b0 + s) * %d + t) * %d;", t, out, T, W)
	g.f("        for (int j = 0; j < %d; ++j) {", H)
	g.f("          th[j * %d + s] = o[j];", S)
	if G == 4 {
		g.f("          tcs[j * %d + s] = o[%d + j];", S, H)
	}
	g.f("        }")
	g.f("      }")
	g.f("    }")
	g.f("  }")
}

func scanBwdSolo(g *cg, c *Ctx, v *ir.Value, at func(int, string) string, out string) {
	cell := Cells[v.Attrs.Str]
	S0, whh := v.Args[1], v.Args[2]
	B, T, H := S0.Shape[0], S0.Shape[1].N, whh.Shape[1].N
	G, W, S := cell.Gates, cell.Width*H, soloTile
	t := c.T
	masked := len(v.Args) > 5
	g.f("  __shared__ %s tdh[%d];", t, S*H)
	if G == 4 {
		g.f("  __shared__ %s tdc[%d];", t, S*H)
	}
	g.f("  __shared__ %s tdg[%d];", t, S*G*H)
	if masked {
		g.f("  __shared__ %s tcarry[%d];", t, S*H)
	}
	g.f("  const long long nb = %s;", c.Dim(B))
	g.f("  for (long long b0 = (long long)blockIdx.x * %d; b0 < nb; b0 += (long long)gridDim.x * %d) {", S, S)
	g.f("    const int ns = nb - b0 < %d ? (int)(nb - b0) : %d;", S, S)
	g.f("    for (int e = 0; e < %d; ++e) {", S*H)
	g.f("      tdh[e] = %s;", c.Lit(0))
	if G == 4 {
		g.f("      tdc[e] = %s;", c.Lit(0))
	}
	if masked {
		g.f("      tcarry[e] = %s;", c.Lit(0))
	}
	g.f("    }")
	g.f("    for (int e = 0; e < %d; ++e) tdg[e] = %s;", S*G*H, c.Lit(0))
	g.f("    for (int t = %d; t >= 0; --t) {", T-1)
	g.f("      for (int s = 0; s < ns; ++s) {")
	g.f("        const long long b = b0 + s;")
	g.f("        const long long so = (b * %d + t) * %d;", T, W)
	g.f("        %s *d = %s + (b * %d + t) * %d;", t, out, T+1, G*H)
	if masked {
		g.f("        const bool on = %s != 0;", at(5, "b * "+itoa(T)+" + t"))
	}
	g.f("        for (int j = 0; j < %d; ++j) {", H)
	g.f("          const %s dhj = tdh[j * %d + s] + %s;", t, S, at(0, "so + j"))
	if masked {
		// A masked-off step passes the state's gradient through.
		g.f("          if (!on) {")
		g.f("            tcarry[j * %d + s] = dhj;", S)
		if G == 4 {
			g.f("            tdc[j * %d + s] += %s;", S, at(0, "so + "+itoa(H)+" + j"))
		}
		for q := 0; q < G; q++ {
			g.f("            d[%d + j] = %s; tdg[(%d + j) * %d + s] = %s;", q*H, c.Lit(0), q*H, S, c.Lit(0))
		}
		g.f("            continue;")
		g.f("          }")
		g.f("          tcarry[j * %d + s] = %s;", S, c.Lit(0))
	}
	switch cell.Name {
	case "rnn_tanh":
		g.f("          const %s h = %s;", t, at(1, "so + j"))
		g.f("          const %s da = dhj * (%s - h * h);", t, c.Lit(1))
		g.f("          d[j] = da; tdg[j * %d + s] = da;", S)
	case "rnn_relu":
		g.f("          const %s da = %s > %s ? dhj : %s;", t, at(1, "so + j"), c.Lit(0), c.Lit(0))
		g.f("          d[j] = da; tdg[j * %d + s] = da;", S)
	case "lstm":
		at1 := func(off int) string { return at(1, "so + "+itoa(off)+" + j") }
		g.f("          const %s cn = %s, i = %s, f = %s, gg = %s, o = %s;", t, at1(H), at1(2*H), at1(3*H), at1(4*H), at1(5*H))
		g.f("          const %s cp = t > 0 ? %s : %s;", t, at(1, "so - "+itoa(W)+" + "+itoa(H)+" + j"), at(4, "b * "+itoa(H)+" + j"))
		di, df, dgg, do := lstmBackward(g, "          ", t, c.Lit(1), func(x string) string { return c.Math("tanh") + "(" + x + ")" }, "tdc[j * "+itoa(S)+" + s]", at(0, "so + "+itoa(H)+" + j"), "cp")
		g.f("          const %s di = %s, df = %s;", t, di, df)
		g.f("          const %s dgg = %s, do_ = %s;", t, dgg, do)
		g.f("          d[j] = di; d[%d + j] = df; d[%d + j] = dgg; d[%d + j] = do_;", H, 2*H, 3*H)
		g.f("          tdg[j * %d + s] = di; tdg[(%d + j) * %d + s] = df; tdg[(%d + j) * %d + s] = dgg; tdg[(%d + j) * %d + s] = do_;", S, H, S, 2*H, S, 3*H, S)
		g.f("          tdc[j * %d + s] = dcj * f;", S)
	}
	g.f("        }")
	g.f("      }")
	// dh_{t-1} = W_hhᵀ · dpre_t: each element of W_hh times the tile's
	// gradients, summed in a vector register (rows past the batch hold
	// zeros).
	g.f("      typedef %s tile_v __attribute__((vector_size(%d * sizeof(%s))));", t, S, t)
	// Four units at a time share each load of the gradients, and read
	// four neighbouring elements of a row of W_hh.
	g.f("      int j = 0;")
	g.f("      for (; j + 4 <= %d; j += 4) {", H)
	for u := 0; u < 4; u++ {
		g.f("        tile_v acc%d = {};", u)
		if masked {
			g.f("        __builtin_memcpy(&acc%d, tcarry + (j + %d) * %d, sizeof acc%d);", u, u, S, u)
		}
	}
	g.f("        for (int r = 0; r < %d; ++r) {", G*H)
	g.f("          tile_v dgr;")
	g.f("          __builtin_memcpy(&dgr, tdg + r * %d, sizeof dgr);", S)
	for u := 0; u < 4; u++ {
		g.f("          acc%d += %s * dgr;", u, at(2, "(long long)r * "+itoa(H)+" + j + "+itoa(u)))
	}
	g.f("        }")
	for u := 0; u < 4; u++ {
		g.f("        __builtin_memcpy(tdh + (j + %d) * %d, &acc%d, sizeof acc%d);", u, S, u, u)
	}
	g.f("      }")
	g.f("      for (; j < %d; ++j) {", H)
	g.f("        tile_v acc = {};")
	if masked {
		g.f("        __builtin_memcpy(&acc, tcarry + j * %d, sizeof acc);", S)
	}
	g.f("        for (int r = 0; r < %d; ++r) {", G*H)
	g.f("          tile_v dgr;")
	g.f("          __builtin_memcpy(&dgr, tdg + r * %d, sizeof dgr);", S)
	g.f("          acc += %s * dgr;", at(2, "(long long)r * "+itoa(H)+" + j"))
	g.f("        }")
	g.f("        __builtin_memcpy(tdh + j * %d, &acc, sizeof acc);", S)
	g.f("      }")
	g.f("    }")
	g.f("    for (int s = 0; s < ns; ++s) {")
	g.f("      %s *last = %s + ((b0 + s) * %d + %d) * %d;", t, out, T+1, T, G*H)
	g.f("      for (int j = 0; j < %d; ++j) {", G*H)
	if G == 4 {
		g.f("        last[j] = j < %d ? tdh[j * %d + s] : (j < %d ? tdc[(j - %d) * %d + s] : %s);", H, S, 2*H, H, S, c.Lit(0))
	} else {
		g.f("        last[j] = tdh[j * %d + s];", S)
	}
	g.f("      }")
	g.f("    }")
	g.f("  }")
}
