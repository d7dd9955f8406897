package codegen

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// ceKernel renders cross-entropy over the last axis, fused with the
// elementwise prologue that produces the logits and, when the group holds
// it, with the gradient: a warp per row (a thread per row when there are
// at most ceThreadClasses classes, too few to share) finds the max, the
// logsumexp, adds
// the row's loss to the mean with one atomic per row and writes
// dlogits = (softmax - onehot) * g / N. The probabilities are recomputed,
// never stored. A label out of range raises the status flag the runtime
// checks after the step (naming the op and the user's line). The host
// target renders its own form instead (ceCPUForm).
//
// With an ignore index (ops.CEIgnore) a row whose label is that index
// adds nothing and gets a zero gradient, and N is the number of the other
// rows. Every block counts them itself over the whole label vector (its
// threads stride over it into one shared counter), before any row's work:
// the loss and the gradient need N before they can be written, and a
// block counting needs no second kernel, no grid-wide barrier and no host
// read. It costs a block a read of the labels (4 bytes a row), which L2
// serves to all but the first block. With no row left N is taken as 1,
// so the loss and the gradients are 0.
func ceKernel(p *compiler.Program, g *compiler.Group, target ops.Target) (*kernel, error) {
	k := newKernel(p, g, target)
	in, out := k.buffers(p, g)
	root := g.Root
	logits, labels := root.Args[0], root.Args[1]
	C := logits.Shape[len(logits.Shape)-1]
	if C.Sym != "" {
		return nil, fmt.Errorf("%s (%s): the class dimension must be static, got %s", root.Op, root.Pos, logits.Shape)
	}
	status, code := "", ""
	for _, c := range p.Plan.Checks {
		if c.Kind == "status" && c.Op == "cross_entropy" && c.Pos == root.Pos.String() {
			status, code = k.param("int *", "status", runtime.ArgRef{Buf: c.Buf, Kind: runtime.ArgPtr}), k.imm(int64(c.Code))
		}
	}
	if status == "" {
		return nil, fmt.Errorf("internal error: %s has no status buffer", g.Name)
	}
	t := logits.DType.CType()
	c := k.ctx(t, "")
	// lanes threads share a row; with one, no warp reductions are needed,
	// and the CPU emulation runs the kernel without fibers.
	lanes := 32
	if C.N <= ceThreadClasses {
		lanes = 1
	}
	ign, ignore := ops.CEIgnore(root.Attrs)
	// The block's count of kept rows (ceCount) synchronises the block.
	k.sync = lanes > 1 || ignore
	w := &k.body
	const threads = 256
	rowsPerBlock := threads / lanes
	fmt.Fprintf(w, "  const long long rows = %s;\n", k.size(labels.Shape))
	fmt.Fprintf(w, "  const int C = %d;\n", C.N)
	// N, the mean's divisor: every row, or those not ignored (den, which
	// ceCount or the host form's count defines).
	n := fmt.Sprintf("(%s)rows", t)
	if ignore {
		n = "den"
	}
	// The scale of the gradient: g / N.
	scale := ""
	if g.Grad != nil {
		gv := g.Grad.Args[2]
		switch {
		case gv.Op == "fill":
			scale = c.Lit(gv.Attrs.F)
		case gv == g.Loss:
			scale = out[g.Loss] + "[0]"
		default:
			scale = in[gv] + "[0]"
		}
		scale = fmt.Sprintf("%s / %s", scale, n)
	}
	z := labels.Shape.Size()
	k.grid = [3]runtime.Expr{{Size: runtime.Size{Mul: z.N, Syms: z.Syms}, Div: int64(rowsPerBlock)}, {Size: runtime.Size{Mul: 1}}, {Size: runtime.Size{Mul: 1}}}
	k.block = [3]int{threads, 1, 1}
	if k.target != ops.CUDA && C.N <= ceCPUClasses {
		k.ceCPUForm(p, g, in, out, C.N, status, code, scale, n)
		return k, nil
	}
	if ignore {
		k.ceCount(in[labels], t, ign)
	}
	if lanes > 1 {
		fmt.Fprintf(w, "  const long long row = (long long)blockIdx.x * %d + (threadIdx.x >> 5);\n", rowsPerBlock)
		w.WriteString("  const int lane = threadIdx.x & 31;\n")
	} else {
		fmt.Fprintf(w, "  const long long row = (long long)blockIdx.x * %d + threadIdx.x;\n", rowsPerBlock)
		w.WriteString("  const int lane = 0;\n")
	}
	w.WriteString("  if (row >= rows) return;\n")
	fmt.Fprintf(w, "  const int label = %s[row];\n", in[labels])
	skip := ceLabel(w, "  ", ign, ignore)
	fmt.Fprintf(w, "  if (bad && lane == 0 && atomicCAS(%s, 0, %s) == 0) { %s[1] = label; %s[2] = (int)row; %s[3] = C; }\n", status, code, status, status, status)
	// x(j) renders the prologue for element j of the row and returns the
	// logit's expression.
	x := func(indent, j string) string {
		fmt.Fprintf(w, "%sconst long long i = row * C + %s;\n", indent, j)
		var b stmts
		e := k.elementwise(p, g, in, "i", indent, &b)
		logit := k.operand(g, logits, in, e, "i", indent, &b)
		b.writeTo(w)
		return logit
	}
	fmt.Fprintf(w, "  %s mx = -NGEN_INF;\n", t)
	loop := fmt.Sprintf("  for (int j = lane; j < C; j += %d) {\n", lanes)
	w.WriteString(loop)
	fmt.Fprintf(w, "    mx = %s(mx, %s);\n", c.Math("fmax"), x("    ", "j"))
	w.WriteString("  }\n")
	if lanes > 1 {
		w.WriteString("  mx = ngen_warp_max(mx);\n")
	}
	fmt.Fprintf(w, "  %s sum = %s;\n", t, c.Lit(0))
	eps := root.Attrs.F // label smoothing: the logits' sum too
	if eps != 0 {
		fmt.Fprintf(w, "  %s sx = %s;\n", t, c.Lit(0))
	}
	w.WriteString(loop)
	if eps != 0 {
		fmt.Fprintf(w, "    const %s xs = %s;\n", t, x("    ", "j"))
		fmt.Fprintf(w, "    sum += %s(xs - mx);\n    sx += xs;\n", c.Math("exp"))
	} else {
		fmt.Fprintf(w, "    sum += %s(%s - mx);\n", c.Math("exp"), x("    ", "j"))
	}
	w.WriteString("  }\n")
	if lanes > 1 {
		w.WriteString("  sum = ngen_warp_sum(sum);\n")
		if eps != 0 {
			w.WriteString("  sx = ngen_warp_sum(sx);\n")
		}
	}
	fmt.Fprintf(w, "  const %s lse = mx + %s(sum);\n", t, c.Math("log"))
	if g.Loss != nil {
		fmt.Fprintf(w, "  if (lane == 0 && !%s) {\n", skip)
		xl := x("    ", "label")
		if eps != 0 {
			fmt.Fprintf(w, "    atomicAdd(%s, (lse - %s * %s - %s * sx) / %s);\n", out[g.Loss], c.Lit(1-eps), xl, c.Lit(eps/float64(C.N)), n)
		} else {
			fmt.Fprintf(w, "    atomicAdd(%s, (lse - %s) / %s);\n", out[g.Loss], xl, n)
		}
		w.WriteString("  }\n")
	}
	// Prologue values used outside the kernel are stored in the last pass.
	var stores []*ir.Value
	for _, v := range g.Outputs {
		if v != g.Loss && v != g.Grad {
			stores = append(stores, v)
		}
	}
	if g.Grad != nil || len(stores) > 0 {
		if g.Grad != nil {
			fmt.Fprintf(w, "  const %s scale = %s;\n", t, scale)
		}
		w.WriteString(loop)
		xj := x("    ", "j") // loads the prologue's values, which stores read too
		if g.Grad != nil {
			// Without the gradient (a loss-scaled model seeds it with a
			// run-time scale, in a kernel of its own) xj was declared
			// unused: nvcc's warning #177-D.
			fmt.Fprintf(w, "    const %s xj = %s;\n", t, xj)
			// The target: (1-ε)·onehot + ε/C.
			on, off := c.Lit(1), c.Lit(0)
			if eps != 0 {
				on, off = c.Lit(1-eps+eps/float64(C.N)), c.Lit(eps/float64(C.N))
			}
			fmt.Fprintf(w, "    %s[i] = %s ? %s : (%s(xj - lse) - (j == label ? %s : %s)) * scale;\n", out[g.Grad], skip, c.Lit(0), c.Math("exp"), on, off)
		}
		for _, v := range stores {
			fmt.Fprintf(w, "    %s[i] = v%d;\n", out[v], v.ID)
		}
		w.WriteString("  }\n")
	}
	return k, nil
}

// ceLabel declares bad (the label is out of range, and not the ignore
// index ign when ignore) and returns the name of the flag that skips a
// row: bad itself, or skip (bad or ignored).
func ceLabel(w *strings.Builder, indent string, ign int, ignore bool) string {
	if !ignore {
		w.WriteString(indent + "const bool bad = label < 0 || label >= C;\n")
		return "bad"
	}
	fmt.Fprintf(w, "%sconst bool ignored = label == %d;\n", indent, ign)
	w.WriteString(indent + "const bool bad = !ignored && (label < 0 || label >= C);\n")
	w.WriteString(indent + "const bool skip = bad || ignored;\n")
	return "skip"
}

// ceCount renders the GPU forms' count of the rows whose label is not the
// ignore index ign, into den (at least 1), before any thread leaves: the
// block's threads stride over the labels and add their counts into one
// shared counter.
func (k *kernel) ceCount(labels, t string, ign int) {
	w := &k.body
	w.WriteString("  __shared__ unsigned long long kept;\n")
	w.WriteString("  if (threadIdx.x == 0) kept = 0;\n")
	w.WriteString("  __syncthreads();\n")
	w.WriteString("  {\n")
	w.WriteString("    unsigned long long n = 0;\n")
	fmt.Fprintf(w, "    for (long long r = threadIdx.x; r < rows; r += blockDim.x) n += %s[r] != %d;\n", labels, ign)
	w.WriteString("    atomicAdd(&kept, n);\n")
	w.WriteString("  }\n")
	w.WriteString("  __syncthreads();\n")
	fmt.Fprintf(w, "  const %s den = (%s)(kept > 0 ? kept : 1);\n", t, t)
}

// ceThreadClasses is the most classes a single thread handles per row; a
// warp per row would leave most lanes idle and pay for two shuffle
// reductions. On the CPU both give way to ceCPUForm; the GPU-forms tests
// (codegen/jit's TestGPUFormsJITModels: 4 and 100 classes) run both.
const ceThreadClasses = 16

// ceCPUClasses is the most classes the CPU form (ceCPUForm) takes: it
// keeps two rows of that many elements on the worker's stack.
const ceCPUClasses = 1 << 14

// ceCPUForm renders the host target's form of the kernel, which the CPU
// backend runs in place of the GPU forms (a warp or a thread per row).
// The warp form ran there as 32
// fibers per row that switch at each of its two butterflies: about 3 µs a
// row, 6.5 ms for the char models' 2048 rows of 99 classes. This form is
// a grid-stride loop over rows (launched with NGEN_RUN_SPAN: no fibers,
// one call per worker), each row in passes the host compiler vectorises:
// the prologue into a row of logits, the max and the sum in eight partial
// lanes, the exponentials once (ngen_emu::fast_expf for f32), and the
// gradient from them. The loss is summed per worker, one atomic each.
// Its sums run in another order than the GPU forms', which the GPU-forms
// tests compare against it.
// With an ignore index, each call first counts the kept rows over the
// whole label vector (once per worker: one vectorised pass) into den.
func (k *kernel) ceCPUForm(p *compiler.Program, g *compiler.Group, in, out map[*ir.Value]string, C int, status, code, scale, n string) {
	w := &k.body
	root := g.Root
	logits, labels := root.Args[0], root.Args[1]
	t := logits.DType.CType()
	c := k.ctx(t, "")
	exp := func(x string) string { return c.Math("exp") + "(" + x + ")" }
	if t == "float" {
		exp = func(x string) string { return "::ngen_emu::fast_expf(" + x + ")" }
	}
	k.gridStride, k.sync = true, false
	ign, ignore := ops.CEIgnore(root.Attrs)
	if ignore {
		w.WriteString("  long long kept = 0;\n")
		fmt.Fprintf(w, "  for (long long r = 0; r < rows; ++r) kept += %s[r] != %d;\n", in[labels], ign)
		fmt.Fprintf(w, "  const %s den = (%s)(kept > 0 ? kept : 1);\n", t, t)
	}
	if g.Grad != nil {
		fmt.Fprintf(w, "  const %s scale = %s;\n", t, scale)
	}
	if g.Loss != nil {
		fmt.Fprintf(w, "  %s loss = %s;\n", t, c.Lit(0))
	}
	w.WriteString("  NGEN_GRID_STRIDE(r, rows) {\n")
	fmt.Fprintf(w, "    const int label = %s[r];\n", in[labels])
	skip := ceLabel(w, "    ", ign, ignore)
	fmt.Fprintf(w, "    if (bad && atomicCAS(%s, 0, %s) == 0) { %s[1] = label; %s[2] = (int)r; %s[3] = C; }\n", status, code, status, status, status)
	fmt.Fprintf(w, "    %s xs[C], ex[C];\n", t)
	// The prologue in rows of C (Ctx.Row): a broadcast bias is then
	// indexed by the column alone.
	k.rowLen = C
	w.WriteString("    for (int j = 0; j < C; ++j) {\n")
	w.WriteString("      const long long i = r * C + j;\n")
	var b stmts
	e := k.elementwise(p, g, in, "i", "      ", &b)
	logit := k.operand(g, logits, in, e, "i", "      ", &b)
	b.writeTo(w)
	fmt.Fprintf(w, "      xs[j] = %s;\n", logit)
	for _, v := range g.Outputs {
		if v != g.Loss && v != g.Grad {
			fmt.Fprintf(w, "      %s[i] = v%d;\n", out[v], v.ID)
		}
	}
	w.WriteString("    }\n")
	k.rowLen = 0
	// The max and the sum in eight lanes, which g++ keeps in vector
	// registers: one chain through the row would be latency-bound. The
	// max compares as fmax does when it starts from -inf (a NaN logit is
	// passed over).
	fmt.Fprintf(w, "    %s part[8];\n", t)
	w.WriteString("    for (int l = 0; l < 8; ++l) part[l] = -NGEN_INF;\n")
	w.WriteString("    for (int j0 = 0; j0 + 8 <= C; j0 += 8)\n")
	w.WriteString("      for (int l = 0; l < 8; ++l) part[l] = xs[j0 + l] > part[l] ? xs[j0 + l] : part[l];\n")
	w.WriteString("    for (int j = C / 8 * 8; j < C; ++j) part[0] = xs[j] > part[0] ? xs[j] : part[0];\n")
	fmt.Fprintf(w, "    %s mx = part[0];\n", t)
	w.WriteString("    for (int l = 1; l < 8; ++l) mx = part[l] > mx ? part[l] : mx;\n")
	fmt.Fprintf(w, "    for (int j = 0; j < C; ++j) ex[j] = %s;\n", exp("xs[j] - mx"))
	fmt.Fprintf(w, "    for (int l = 0; l < 8; ++l) part[l] = %s;\n", c.Lit(0))
	w.WriteString("    for (int j0 = 0; j0 + 8 <= C; j0 += 8)\n")
	w.WriteString("      for (int l = 0; l < 8; ++l) part[l] += ex[j0 + l];\n")
	w.WriteString("    for (int j = C / 8 * 8; j < C; ++j) part[0] += ex[j];\n")
	fmt.Fprintf(w, "    const %s sum = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));\n", t)
	eps := root.Attrs.F // label smoothing (ceKernel)
	if g.Loss != nil {
		if eps != 0 {
			fmt.Fprintf(w, "    for (int l = 0; l < 8; ++l) part[l] = %s;\n", c.Lit(0))
			w.WriteString("    for (int j0 = 0; j0 + 8 <= C; j0 += 8)\n")
			w.WriteString("      for (int l = 0; l < 8; ++l) part[l] += xs[j0 + l];\n")
			w.WriteString("    for (int j = C / 8 * 8; j < C; ++j) part[0] += xs[j];\n")
			fmt.Fprintf(w, "    const %s sx = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));\n", t)
			fmt.Fprintf(w, "    if (!%s) loss += (mx + %s(sum) - %s * xs[label] - %s * sx) / %s;\n", skip, c.Math("log"), c.Lit(1-eps), c.Lit(eps/float64(C)), n)
		} else {
			fmt.Fprintf(w, "    if (!%s) loss += (mx + %s(sum) - xs[label]) / %s;\n", skip, c.Math("log"), n)
		}
	}
	if g.Grad != nil {
		// The one-hot term outside the loop, which g++ vectorises only
		// without the select: the label's element is rewritten after it.
		fmt.Fprintf(w, "    %s *const dx = %s + r * C;\n", t, out[g.Grad])
		if eps != 0 {
			fmt.Fprintf(w, "    for (int j = 0; j < C; ++j) dx[j] = %s ? %s : (ex[j] / sum - %s) * scale;\n", skip, c.Lit(0), c.Lit(eps/float64(C)))
			fmt.Fprintf(w, "    if (!%s) dx[label] = (ex[label] / sum - %s) * scale;\n", skip, c.Lit(1-eps+eps/float64(C)))
		} else {
			fmt.Fprintf(w, "    for (int j = 0; j < C; ++j) dx[j] = %s ? %s : ex[j] / sum * scale;\n", skip, c.Lit(0))
			fmt.Fprintf(w, "    if (!%s) dx[label] = (ex[label] / sum - %s) * scale;\n", skip, c.Lit(1))
		}
	}
	w.WriteString("  }\n")
	if g.Loss != nil {
		fmt.Fprintf(w, "  atomicAdd(%s, loss);\n", out[g.Loss])
	}
}
