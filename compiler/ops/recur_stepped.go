package ops

import (
	"github.com/ngen-ml/ngen/compiler/ir"
)

// The stepped GPU form of rnn_scan and rnn_scan_bwd: one time step a
// launch, over the whole batch at once. The kernel is launched T times
// (backward T+1) in a row, in the step's stream and graph, and the launch
// boundary is the barrier between time steps (KernelInfo.Steps).
//
// The block-per-sequence form (recur_templates.go) streams all of W_hh
// through each of B blocks at every step, on B SMs: the LSTM LM's
// 1 MiB matrix took 53 µs a step on an H200. Here a block owns a tile of
// stepUnits hidden units and stepTile sequences: every step reads W_hh once
// per tile of sequences (G·8 rows a block), in chunks staged through
// shared memory, and the grid spreads over ceil(H ÷ 8) × ceil(B ÷ 32)
// blocks of 128 threads. Consecutive lanes take consecutive units
// (32-byte runs of xp, S and D); each thread keeps the gates of stepSeqs
// sequences in registers.
//
// Forward, launch t: pre = xp_t + W_hh·h_{t-1} (h_{t-1} from row t-1 of S,
// or h0), the cell, row t of S.
//
// Backward, launch L (t = T-1-L; the last launch, t = -1, finishes):
// dh_t = gS_t + W_hhᵀ·dpre_{t+1} (dpre_{t+1} is row t+1 of D, written by
// the launch before), the cell's backward, row t of D. The LSTM's cell
// gradient carried from step to step lives in D's last row (its [H, 2H)
// part, which ends as dc0), read and written by the thread that owns the
// unit. A masked-off step t stores the state gradient it passes through
// in D's row t (first H), where the next launch reads it in place of the
// product and zeroes it: a masked-off step's row of D ends as zeros, as
// the other forms leave it.
//
// Products sum over k (or r) in ascending order from the pre-activation
// (0 backward), as the HostBaseline form (recur_solo.go) does, so the two
// agree bit for bit where the compiler contracts nothing.

const (
	stepThreads = 128
	stepUnits   = 8                       // hidden units a block owns: a lane each
	stepSlots   = stepThreads / stepUnits // threads per unit
	stepSeqs    = 2                       // sequences a thread
	stepTile    = stepSlots * stepSeqs    // sequences a block
	// StepTile is the sequences of a stepped launch's tile (each tile
	// reads all of W_hh at every step).
	StepTile  = stepTile
	stepChunk = 64 // elements of the product's inner dimension staged at once
)

// SteppedMinBytes is the recurrent matrix above which a recurrence's GPU
// form is the stepped one. ngen report -gpu's model (codegen/report_gpu.go)
// prices a step of the block-per-sequence form at 2 µs plus the matrix at
// 20.5 GB/s a block, and a launch at a 4 µs floor: they cross at about
// 41 KB; a matrix under 32 KiB stays in the loop form, whose step costs
// little more than its barriers.
const SteppedMinBytes = 32 << 10

// scanStepped is rnn_scan's and rnn_scan_bwd's Def.Stepped: T launches
// (backward T+1) over ceil(H ÷ stepUnits) × B work items, stepTile per
// block; the default where W_hh is at least SteppedMinBytes.
func scanStepped(extra int) func(v *ir.Value) Steps {
	return func(v *ir.Value) Steps {
		T, product, ok := ScanWork(v)
		if !ok {
			return Steps{}
		}
		whh := v.Args[1]
		if v.Op == "rnn_scan_bwd" {
			whh = v.Args[2]
		}
		H := whh.Shape[1].N
		units := (H + stepUnits - 1) / stepUnits
		return Steps{Launches: T + extra, Work: ir.Shape{v.Shape[0], ir.D(units)}, Per: stepTile, Threads: stepThreads,
			Auto: product/2*int64(v.DType.Size()) >= SteppedMinBytes}
	}
}

// steppedOpen starts the tile loop: j0 and b0 the tile's first unit and
// sequence, j this thread's unit, sb its first sequence's slot in the tile.
func steppedOpen(g *cg, c *Ctx, b ir.Dim, H int) {
	units := (H + stepUnits - 1) / stepUnits
	g.f("const long long nb = %s;", c.Dim(b))
	g.f("const long long ntiles = (nb + %d) / %d * %d;", stepTile-1, stepTile, units)
	g.f("const int u = threadIdx.x %% %d, sb = threadIdx.x / %d * %d;", stepUnits, stepUnits, stepSeqs)
	g.f("for (long long tile = blockIdx.x; tile < ntiles; tile += gridDim.x) {")
	g.f("  const int j0 = (int)(tile %% %d) * %d, j = j0 + u;", units, stepUnits)
	g.f("  const long long b0 = tile / %d * %d;", units, stepTile)
}

// steppedEach opens the loop over this thread's sequences b (slot r) of
// the tile, for unit j; past the batch or the units it does nothing.
func steppedEach(g *cg, H int) {
	g.f("  for (int r = 0; r < %d; ++r) {", stepSeqs)
	g.f("    const long long b = b0 + sb + r;")
	g.f("    if (j >= %d || b >= nb) continue;", H)
}

func scanFwdStepped(g *cg, c *Ctx, v *ir.Value, at func(int, string) string, out string) {
	cell := Cells[v.Attrs.Str]
	xp, whh := v.Args[0], v.Args[1]
	B, T, H := xp.Shape[0], xp.Shape[1].N, whh.Shape[1].N
	G, W := cell.Gates, cell.Width*H
	t := c.T
	masked := len(v.Args) > 4
	g.f("__shared__ %s wsm[%d][%d];", t, G*stepUnits, stepChunk+1)
	g.f("__shared__ %s hsm[%d][%d];", t, stepTile, stepChunk+1)
	g.f("const int t = %s;", c.Launch)
	steppedOpen(g, c, B, H)
	// h_{t-1} and c_{t-1} of sequence b, unit or column e.
	hprev := func(b, e string) string {
		return "(t ? " + out + "[(" + b + " * " + itoa(T) + " + t - 1) * " + itoa(W) + " + " + e + "] : " + at(2, b+" * "+itoa(H)+" + "+e) + ")"
	}
	cprev := func(b, e string) string {
		return "(t ? " + out + "[(" + b + " * " + itoa(T) + " + t - 1) * " + itoa(W) + " + " + itoa(H) + " + " + e + "] : " + at(3, b+" * "+itoa(H)+" + "+e) + ")"
	}
	g.f("  %s a[%d][%d];", t, G, stepSeqs)
	g.f("  for (int r = 0; r < %d; ++r) {", stepSeqs)
	g.f("    const long long b = b0 + sb + r;")
	g.f("    const bool in = j < %d && b < nb;", H)
	for q := 0; q < G; q++ {
		g.f("    a[%d][r] = in ? %s : %s;", q, at(0, "(b * "+itoa(T)+" + t) * "+itoa(G*H)+" + "+itoa(q*H)+" + j"), c.Lit(0))
	}
	g.f("  }")
	g.f("  for (int k0 = 0; k0 < %d; k0 += %d) {", H, stepChunk)
	g.f("    const int kn = %d - k0 < %d ? %d - k0 : %d;", H, stepChunk, H, stepChunk)
	// Rows q·H + j0 + e of W_hh, columns k0 .. k0+kn, for every gate q.
	g.f("    for (int e = threadIdx.x; e < %d; e += blockDim.x) {", G*stepUnits*stepChunk)
	g.f("      const int row = e / %d, kk = e %% %d, q = row / %d, uu = row %% %d;", stepChunk, stepChunk, stepUnits, stepUnits)
	g.f("      wsm[row][kk] = j0 + uu < %d && kk < kn ? %s : %s;", H, at(1, "(long long)(q * "+itoa(H)+" + j0 + uu) * "+itoa(H)+" + k0 + kk"), c.Lit(0))
	g.f("    }")
	g.f("    for (int e = threadIdx.x; e < %d; e += blockDim.x) {", stepTile*stepChunk)
	g.f("      const int s = e / %d, kk = e %% %d;", stepChunk, stepChunk)
	g.f("      const long long b = b0 + s;")
	g.f("      hsm[s][kk] = b < nb && kk < kn ? %s : %s;", hprev("b", "k0 + kk"), c.Lit(0))
	g.f("    }")
	g.f("    __syncthreads();")
	g.f("    for (int kk = 0; kk < kn; ++kk) {")
	g.f("      for (int r = 0; r < %d; ++r) {", stepSeqs)
	g.f("        const %s hk = hsm[sb + r][kk];", t)
	for q := 0; q < G; q++ {
		g.f("        a[%d][r] += wsm[%d + u][kk] * hk;", q, q*stepUnits)
	}
	g.f("      }")
	g.f("    }")
	g.f("    __syncthreads();")
	g.f("  }")
	steppedEach(g, H)
	g.f("    %s *s = %s + (b * %d + t) * %d;", t, out, T, W)
	keep := func(x, prev string) string {
		if !masked {
			return x
		}
		return "(on ? " + x + " : " + prev + ")"
	}
	if masked {
		g.f("    const bool on = %s != 0;", at(4, "b * "+itoa(T)+" + t"))
		g.f("    const %s hp = %s;", t, hprev("b", "j"))
	}
	switch cell.Name {
	case "rnn_tanh":
		g.f("    s[j] = %s;", keep(c.Math("tanh")+"(a[0][r])", "hp"))
	case "rnn_relu":
		g.f("    s[j] = %s;", keep("(a[0][r] > "+c.Lit(0)+" ? a[0][r] : "+c.Lit(0)+")", "hp"))
	case "lstm":
		g.f("    const %s cp = %s;", t, cprev("b", "j"))
		tanh := func(x string) string { return c.Math("tanh") + "(" + x + ")" }
		lstmForward(g, "    ", t, "s", "o", H, [4]string{sigmoid(c, "a[0][r]"), sigmoid(c, "a[1][r]"), tanh("a[2][r]"), sigmoid(c, "a[3][r]")}, tanh, "cp", "hp", keep)
	}
	g.f("  }")
	g.f("}")
}

func scanBwdStepped(g *cg, c *Ctx, v *ir.Value, at func(int, string) string, out string) {
	cell := Cells[v.Attrs.Str]
	S, whh := v.Args[1], v.Args[2]
	B, T, H := S.Shape[0], S.Shape[1].N, whh.Shape[1].N
	G, W := cell.Gates, cell.Width*H
	GH := G * H
	t := c.T
	masked := len(v.Args) > 5
	g.f("__shared__ %s wsm[%d][%d];", t, stepChunk, stepUnits+1)
	g.f("__shared__ %s dsm[%d][%d];", t, stepTile, stepChunk+1)
	g.f("const int L = %s, t = %d - L;", c.Launch, T-1)
	steppedOpen(g, c, B, H)
	// row(b, t) is the offset of row t of D for sequence b.
	row := func(b, tt string) string { return "(" + b + " * " + itoa(T+1) + " + " + tt + ") * " + itoa(GH) }
	g.f("  %s acc[%d];", t, stepSeqs)
	g.f("  for (int r = 0; r < %d; ++r) acc[r] = %s;", stepSeqs, c.Lit(0))
	// W_hhᵀ·dpre_{t+1}: nothing at the first launch (dh_T is 0).
	g.f("  for (int r0 = 0; L > 0 && r0 < %d; r0 += %d) {", GH, stepChunk)
	g.f("    const int rn = %d - r0 < %d ? %d - r0 : %d;", GH, stepChunk, GH, stepChunk)
	g.f("    for (int e = threadIdx.x; e < %d; e += blockDim.x) {", stepChunk*stepUnits)
	g.f("      const int rr = e / %d, uu = e %% %d;", stepUnits, stepUnits)
	g.f("      wsm[rr][uu] = rr < rn && j0 + uu < %d ? %s : %s;", H, at(2, "(long long)(r0 + rr) * "+itoa(H)+" + j0 + uu"), c.Lit(0))
	g.f("    }")
	g.f("    for (int e = threadIdx.x; e < %d; e += blockDim.x) {", stepTile*stepChunk)
	g.f("      const int s = e / %d, rr = e %% %d;", stepChunk, stepChunk)
	g.f("      const long long b = b0 + s;")
	g.f("      dsm[s][rr] = b < nb && rr < rn ? %s[%s + r0 + rr] : %s;", out, row("b", "t + 1"), c.Lit(0))
	g.f("    }")
	g.f("    __syncthreads();")
	g.f("    for (int rr = 0; rr < rn; ++rr) {")
	g.f("      const %s w = wsm[rr][u];", t)
	g.f("      for (int r = 0; r < %d; ++r) acc[r] += w * dsm[sb + r][rr];", stepSeqs)
	g.f("    }")
	g.f("    __syncthreads();")
	g.f("  }")
	steppedEach(g, H)
	g.f("    %s dh = acc[r];", t)
	if masked {
		// Step t+1 was masked off: its row holds the gradient it passed
		// through, in place of a product of zeros.
		g.f("    if (L > 0 && %s == 0) {", at(5, "b * "+itoa(T)+" + t + 1"))
		g.f("      dh = %s[%s + j];", out, row("b", "t + 1"))
		g.f("      %s[%s + j] = %s;", out, row("b", "t + 1"), c.Lit(0))
		g.f("    }")
	}
	g.f("    %s *last = %s + %s;", t, out, row("b", itoa(T)))
	g.f("    if (t < 0) {")
	// The gradients of h0 and (LSTM) c0, whose part of the last row
	// already holds the carried cell gradient.
	g.f("      last[j] = dh;")
	for q := 2; q < G; q++ {
		g.f("      last[%d + j] = %s;", q*H, c.Lit(0))
	}
	g.f("      continue;")
	g.f("    }")
	g.f("    const long long so = (b * %d + t) * %d;", T, W)
	g.f("    %s *d = %s + %s;", t, out, row("b", "t"))
	g.f("    const %s dhj = dh + %s;", t, at(0, "so + j"))
	if G == 4 {
		g.f("    const %s dcc = L ? last[%d + j] : %s;", t, H, c.Lit(0))
	}
	if masked {
		g.f("    if (%s == 0) {", at(5, "b * "+itoa(T)+" + t"))
		g.f("      d[j] = dhj;")
		for q := 1; q < G; q++ {
			g.f("      d[%d + j] = %s;", q*H, c.Lit(0))
		}
		if G == 4 {
			g.f("      last[%d + j] = dcc + %s;", H, at(0, "so + "+itoa(H)+" + j"))
		}
		g.f("      continue;")
		g.f("    }")
	}
	switch cell.Name {
	case "rnn_tanh":
		g.f("    const %s h = %s;", t, at(1, "so + j"))
		g.f("    d[j] = dhj * (%s - h * h);", c.Lit(1))
	case "rnn_relu":
		g.f("    d[j] = %s > %s ? dhj : %s;", at(1, "so + j"), c.Lit(0), c.Lit(0))
	case "lstm":
		at1 := func(off int) string { return at(1, "so + "+itoa(off)+" + j") }
		g.f("    const %s cn = %s, i = %s, f = %s, gg = %s, o = %s;", t, at1(H), at1(2*H), at1(3*H), at1(4*H), at1(5*H))
		g.f("    const %s cp = t > 0 ? %s : %s;", t, at(1, "so - "+itoa(W)+" + "+itoa(H)+" + j"), at(4, "b * "+itoa(H)+" + j"))
		di, df, dgg, do := lstmBackward(g, "    ", t, c.Lit(1), func(x string) string { return c.Math("tanh") + "(" + x + ")" }, "dcc", at(0, "so + "+itoa(H)+" + j"), "cp")
		g.f("    d[j] = %s;", di)
		g.f("    d[%d + j] = %s;", H, df)
		g.f("    d[%d + j] = %s;", 2*H, dgg)
		g.f("    d[%d + j] = %s;", 3*H, do)
		g.f("    last[%d + j] = dcj * f;", H)
	}
	g.f("  }")
	g.f("}")
}
