package codegen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// The kernels of a transactional step (compiler/guard.go): the guard,
// which checks the loss and the gradients once the backward pass is done,
// and the commits, which write state only when the status block says the
// step is good. The optimizer kernels get the same test as their first
// line (guardOpt).

// stepBad is the C test of a failed step on the status block st.
func stepBad(st string) string { return fmt.Sprintf("(%s[0] | %s[4] | %s[5]) != 0", st, st, st) }

// statusBuffer is the plan's status block, or -1.
func statusBuffer(plan *runtime.Plan) int {
	for i, b := range plan.Buffers {
		if b.Role == "status" {
			return i
		}
	}
	return -1
}

// isOptGroup reports whether a group belongs to the optimizer update.
func isOptGroup(g *compiler.Group) bool {
	for _, v := range g.Values {
		if v.Phase == "opt" {
			return true
		}
	}
	return false
}

// guardOpt makes an optimizer kernel return at once after a failed step.
// The test is uniform across the grid, so kernels with barriers may return
// early too.
func guardOpt(k *kernel, status int) {
	st := k.param("const int *", "status", runtime.ArgRef{Buf: status, Kind: runtime.ArgPtr})
	body := k.body.String()
	k.body.Reset()
	fmt.Fprintf(&k.body, "  if (%s) return; // a failed step commits nothing\n", stepBad(st))
	k.body.WriteString(body)
	k.comment = append(k.comment, "(skipped when the status block reports a failed step)")
}

// builtinKernel renders the kernel of a Builtin launch step.
func builtinKernel(plan *runtime.Plan, st *runtime.Step) (*kernel, error) {
	status := statusBuffer(plan)
	if status < 0 {
		return nil, fmt.Errorf("internal error: %s step without a status block", st.Builtin)
	}
	k := &kernel{byName: map[string]int{}, block: [3]int{256, 1, 1}, gridStride: true, plan: plan}
	ctype := func(i int) string {
		return map[runtime.DType]string{runtime.F32: "float", runtime.F64: "double", runtime.I32: "int"}[plan.Buffers[i].DType]
	}
	w := &k.body
	switch st.Builtin {
	case runtime.GuardKernel:
		grads := -1
		for i, b := range plan.Buffers {
			if b.Role == "grads" {
				grads = i
			}
		}
		if grads < 0 {
			return nil, fmt.Errorf("internal error: guard step without a gradient vector")
		}
		t, lt := ctype(grads), ctype(st.Src)
		k.name = "ngen_guard_" + t
		k.comment = []string{"the loss and every gradient finite; the loss into the status block"}
		sb := k.param("int *", "status", runtime.ArgRef{Buf: st.Buf, Kind: runtime.ArgPtr})
		g := k.param("const "+t+" *__restrict__", "grads", runtime.ArgRef{Buf: grads, Kind: runtime.ArgPtr})
		l := k.param("const "+lt+" *__restrict__", "loss", runtime.ArgRef{Buf: st.Src, Kind: runtime.ArgPtr})
		n := k.runtimeSize(plan.Buffers[grads].Elems)
		k.grid = [3]runtime.Expr{{Size: plan.Buffers[grads].Elems, Div: 256, Max: 1 << 10}, {Size: runtime.Size{Mul: 1}}, {Size: runtime.Size{Mul: 1}}}
		// A value is NaN or ±Inf when its exponent bits are all ones. The
		// test is on the bits, and an OR of integers is associative, so
		// the loop vectorises without fast-math.
		bitsOf, mask, ut := "__float_as_uint", "0x7f800000u", "unsigned"
		if t == "double" {
			bitsOf, mask, ut = "(unsigned long long)__double_as_longlong", "0x7ff0000000000000ull", "unsigned long long"
		}
		// The largest |gradient| (status word 8, for the update check's
		// bound) is a maximum of the sign-cleared bits, an integer
		// reduction that vectorises too.
		st, abs := "int", "0x7fffffffu"
		if t == "double" {
			st, abs = "long long", "0x7fffffffffffffffull"
		}
		w.WriteString("  int bad = 0;\n")
		fmt.Fprintf(w, "  %s big = 0;\n", st)
		fmt.Fprintf(w, "  const long long n = %s;\n", n)
		fmt.Fprintf(w, "  NGEN_GRID_STRIDE(i, n) {\n    const %s u = %s(%s[i]);\n    bad |= (u & %s) == %s;\n    const %s a = (%s)(u & %s);\n    big = a > big ? a : big;\n  }\n",
			ut, bitsOf, g, mask, mask, st, st, abs)
		fmt.Fprintf(w, "  if (bad) atomicMax(&%s[5], 1);\n", sb)
		w.WriteString(maxWord(t, "big", sb, 8))
		w.WriteString("  if (blockIdx.x == 0 && threadIdx.x == 0) {\n")
		fmt.Fprintf(w, "    const double l = (double)%s[0];\n", l)
		fmt.Fprintf(w, "    if (!(l - l == 0.0)) atomicMax(&%s[4], 1);\n", sb)
		w.WriteString("    const long long bits = __double_as_longlong(l);\n")
		fmt.Fprintf(w, "    %s[6] = (int)(unsigned)(unsigned long long)bits;\n", sb)
		fmt.Fprintf(w, "    %s[7] = (int)(unsigned)((unsigned long long)bits >> 32);\n", sb)
		w.WriteString("  }\n")
	case runtime.CommitKernel:
		// One launch commits every state buffer of the phase: a
		// grid-stride loop per buffer, the grid sized for the largest.
		if len(st.Commits) == 0 {
			return nil, fmt.Errorf("internal error: commit step without state")
		}
		k.name = "ngen_commit"
		k.comment = []string{"each state buffer ← its new value, unless the step failed"}
		sb := k.param("const int *", "status", runtime.ArgRef{Buf: status, Kind: runtime.ArgPtr})
		fmt.Fprintf(w, "  if (%s) return;\n", stepBad(sb))
		big := plan.Buffers[st.Commits[0].Dst].Elems
		for j, c := range st.Commits {
			t := ctype(c.Dst)
			if ctype(c.Src) != t {
				return nil, fmt.Errorf("internal error: commit of %s from %s changes the type", plan.Buffers[c.Dst].Name, plan.Buffers[c.Src].Name)
			}
			d := k.param(t+" *__restrict__", fmt.Sprintf("dst%d", j), runtime.ArgRef{Buf: c.Dst, Kind: runtime.ArgPtr})
			s := k.param("const "+t+" *__restrict__", fmt.Sprintf("src%d", j), runtime.ArgRef{Buf: c.Src, Kind: runtime.ArgPtr})
			el := plan.Buffers[c.Dst].Elems
			if el.Mul > big.Mul {
				big = el
			}
			fmt.Fprintf(w, "  NGEN_GRID_STRIDE(i, %s) { %s[i] = %s[i]; } // %s\n", k.runtimeSize(el), d, s, plan.Buffers[c.Dst].Name)
		}
		k.grid = [3]runtime.Expr{{Size: big, Div: 256, Max: 1 << 20}, {Size: runtime.Size{Mul: 1}}, {Size: runtime.Size{Mul: 1}}}
	case runtime.UpdateCheckKernel:
		if err := updateCheck(k, plan, st.Buf); err != nil {
			return nil, err
		}
	case runtime.GradNormKernel:
		if err := gradNorm(k, plan, st); err != nil {
			return nil, err
		}
	case runtime.ClockKernel:
		if err := clockKernel(k, plan, st); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("internal error: unknown builtin kernel %q", st.Builtin)
	}
	return k, nil
}

// runtimeSize renders a plan size as C, declaring its symbols.
func (k *kernel) runtimeSize(z runtime.Size) string {
	parts := []string{fmt.Sprintf("%dLL", z.Mul)}
	for _, y := range z.Syms {
		parts = append(parts, "(long long)"+k.scalar(y, "int"))
	}
	return strings.Join(parts, " * ")
}

// maxWord raises status word w of sb to the magnitude whose sign-cleared
// bits are big: float32 bits, rounded up (to +Inf beyond float32's range)
// from a double. Reading the word first keeps contention low on a GPU.
func maxWord(t, big, sb string, w int) string {
	if t == "double" {
		return fmt.Sprintf("  {\n    const double d_ = __longlong_as_double(%s);\n    float f_ = (float)d_;\n    if ((double)f_ < d_) f_ = __int_as_float(__float_as_int(f_) + 1);\n"+
			"    const int w_ = __float_as_int(f_);\n    if (w_ > %s[%d]) atomicMax(&%s[%d], w_);\n  }\n", big, sb, w, sb, w)
	}
	return fmt.Sprintf("  if (%s > %s[%d]) atomicMax(&%s[%d], %s);\n", big, sb, w, sb, w, big)
}

// updateCheck renders the update check (runtime.UpdateCheckKernel), the
// first kernel of the update phase. When the step's largest |gradient|
// (status word 8, from the guard) is at most the clock's scalar gsafe, a
// bound proves every new value finite and it returns at once
// (runtime/update_bound.go). Otherwise it computes every new parameter
// and optimizer state value as the lowered update does
// (compiler/optimizer.go: the same operations in the same order and
// type, but for f32 Adam's quotient, taken through a reciprocal) without
// storing them, marks the step failed (status word 5 = 2)
// when one is not finite or is within a factor 2 of overflow, and records
// the largest magnitudes for the clock's bound (words 9..12). The margin
// covers FMA contraction, which nvcc may apply differently to this kernel
// and the update's; a value that large would overflow the next step
// anyway. Finite gradients, a bounded learning rate (runtime.MaxLR) and
// finite state do not make a finite update: g·g overflows for |g| >
// 1.8e19 in f32, SGD's lr·g and weight decay's geometric growth can
// overflow.
func updateCheck(k *kernel, plan *runtime.Plan, status int) error {
	o := plan.Optimizer
	find := func(role, name string) int {
		for i, b := range plan.Buffers {
			if b.Role == role && (name == "" || b.Name == name) {
				return i
			}
		}
		return -1
	}
	pb, gb := find("params", ""), find("grads", "")
	if pb < 0 || gb < 0 {
		return fmt.Errorf("internal error: update check without the flat parameter and gradient vectors")
	}
	t := map[runtime.DType]string{runtime.F32: "float", runtime.F64: "double"}[plan.Buffers[pb].DType]
	if t == "" {
		return fmt.Errorf("internal error: update check of %s parameters", plan.Buffers[pb].DType)
	}
	c := &ops.Ctx{T: t}
	k.name = "ngen_update_check_" + t
	k.comment = []string{"the " + o.Kind + " update computed and not stored: status[5] = 2 unless every new value is finite with a margin",
		"(returns at once when the bound covers the step's largest gradient)"}
	sb := k.param("int *", "status", runtime.ArgRef{Buf: status, Kind: runtime.ArgPtr})
	in := func(buf int, name string) string {
		return k.param("const "+t+" *__restrict__", name, runtime.ArgRef{Buf: buf, Kind: runtime.ArgPtr})
	}
	P, G := in(pb, "params"), in(gb, "grads")
	state := func(key string) (string, error) {
		i := find("state", o.Kind+"."+key)
		if i < 0 {
			return "", fmt.Errorf("internal error: update check: no %s.%s state", o.Kind, key)
		}
		return in(i, compiler.Sanitize(key)), nil
	}
	n := k.runtimeSize(plan.Buffers[pb].Elems)
	k.grid = [3]runtime.Expr{{Size: plan.Buffers[pb].Elems, Div: 256, Max: 1 << 10}, {Size: runtime.Size{Mul: 1}}, {Size: runtime.Size{Mul: 1}}}
	sc := func(name string) string { return k.scalar(name, t) }
	gsafe := sc("gsafe")
	// One loop per parameter group over its slice of the flat vectors
	// (runtime/param_groups.go), each with the group's options.
	rules := o.Rules()
	total := plan.Buffers[pb].Elems.Mul
	type span struct{ off, n int64 }
	spans := make([]span, len(rules))
	var end int64
	for i, g := range o.Groups {
		spans[i] = span{g.Offset, g.Elems}
		end = g.Offset + g.Elems
	}
	spans[len(rules)-1] = span{end, total - end}
	var loops [][]string // per group: statements over p, g and i
	var news []string    // the new parameter, then the state in status-word order
	for gi, rule := range rules {
		body, nw, err := updateCheckBody(c, o, rule, sc, state)
		if err != nil {
			return err
		}
		if gi == 0 || len(nw) > len(news) {
			news = nw
		}
		loops = append(loops, body)
	}
	// |x| above half the largest finite value, NaN and ±Inf, on the
	// bits: integer compares and maxima, which vectorise.
	bitsOf, abs, limit, st := "__float_as_uint", "0x7fffffffu", "0x7effffffu", "int"
	if t == "double" {
		bitsOf, abs, limit, st = "(unsigned long long)__double_as_longlong", "0x7fffffffffffffffull", "0x7fdfffffffffffffull", "long long"
	}
	w := &k.body
	fmt.Fprintf(w, "  if (%s) return; // the step already failed\n", stepBad(sb))
	fmt.Fprintf(w, "  if ((%s)__int_as_float(%s[8]) <= %s) return; // the bound covers the largest gradient\n", t, sb, gsafe)
	for j := range news {
		fmt.Fprintf(w, "  %s big%d = 0;\n", st, j)
	}
	if len(loops) == 1 {
		fmt.Fprintf(w, "  const long long n = %s;\n", n)
	}
	g := G + "[i]"
	if o.Scaler != nil { // as compiler/optimizer.go unscales it, first
		g = fmt.Sprintf("(%s * %s)", g, k.scalar(runtime.InvScaleScalar, t))
	}
	if o.ClipValue > 0 { // as compiler/optimizer.go clamps it
		f := c.Lit(o.ClipValue)
		g = fmt.Sprintf("(%s < -%s ? -%s : (%s > %s ? %s : %s))", g, f, f, g, f, f, g)
	}
	if o.GradNorm() { // as clip_norm_scale scales it
		// Read once, before the loops: inside them ptxas spilled a
		// register of the gpt's check (TestNVCCTransformerPackages).
		fmt.Fprintf(w, "  const %s clip = %s;\n", t, ops.ClipCoef(t, sb, k.scalar("max_norm", t)))
		g = fmt.Sprintf("(%s * clip)", g)
	}
	for gi, body := range loops {
		if spans[gi].n == 0 {
			continue // the default group, when the declared ones took every parameter
		}
		if len(loops) == 1 {
			fmt.Fprintf(w, "  NGEN_GRID_STRIDE(i, n) {\n")
		} else {
			fmt.Fprintf(w, "  NGEN_GRID_STRIDE(e%d, %dLL) { // parameter group %s\n    const long long i = %dLL + e%d;\n", gi, spans[gi].n, rules[gi].Suffix, spans[gi].off, gi)
		}
		fmt.Fprintf(w, "    const %s p = %s[i], g = %s;\n", t, P, g)
		for _, x := range body {
			fmt.Fprintf(w, "    %s\n", x)
		}
		for j, x := range news {
			fmt.Fprintf(w, "    const %s a%d = (%s)(%s(%s) & %s);\n", st, j, st, bitsOf, x, abs)
			fmt.Fprintf(w, "    big%d = a%d > big%d ? a%d : big%d;\n", j, j, j, j, j)
		}
		w.WriteString("  }\n")
	}
	// A value past the limit, NaN or ±Inf makes its maximum pass it.
	var over []string
	for j := range news {
		over = append(over, fmt.Sprintf("big%d > (%s)%s", j, st, limit))
	}
	fmt.Fprintf(w, "  if (%s) atomicMax(&%s[5], 2);\n", strings.Join(over, " || "), sb)
	for j := range news {
		w.WriteString(maxWord(t, fmt.Sprintf("big%d", j), sb, 9+j))
	}
	fmt.Fprintf(w, "  %s[12] = 1;\n", sb)
	return nil
}

// updateCheckBody is the update check's computation for one parameter
// group: statements over p, g and the index i, and the names of the new
// parameter and state values in status-word order. It follows
// compiler/optimizer.go's lowerGroup operation for operation.
func updateCheckBody(c *ops.Ctx, o runtime.Optimizer, rule runtime.GroupRule, scalar func(string) string, state func(string) (string, error)) (body, news []string, _ error) {
	t, lit := c.T, c.Lit
	sc := func(name string) string { return scalar(name + rule.Suffix) }
	switch o.Kind {
	case "adam", "adamw":
		m, err := state("exp_avg")
		if err != nil {
			return nil, nil, err
		}
		v, err := state("exp_avg_sq")
		if err != nil {
			return nil, nil, err
		}
		g := "g"
		if o.Kind == "adam" {
			g = fmt.Sprintf("(g + (p * %s))", sc("wd"))
		}
		body = append(body,
			fmt.Sprintf("const %s gd = %s;", t, g),
			fmt.Sprintf("const %s m2 = ((%s[i] * %s) + (gd * %s));", t, m, lit(rule.Beta1), lit(1-rule.Beta1)),
			fmt.Sprintf("const %s v2 = ((%s[i] * %s) + ((gd * gd) * %s));", t, v, lit(rule.Beta2), lit(1-rule.Beta2)),
			fmt.Sprintf("const %s den = ((%s(v2) / %s) + %s);", t, c.Math("sqrt"), sc("bc2_sqrt"), lit(o.Eps)))
		p0 := "p"
		if o.Kind == "adamw" {
			p0 = fmt.Sprintf("(p * %s)", sc("decay"))
		}
		// m/den as m·(1/den) in f32: IEEE division's slow path made ptxas
		// spill registers in this kernel on sm_90; the product is within an
		// ulp of the quotient, far inside the margin.
		q := "(m2 / den)"
		if t == "float" {
			q = "(m2 * __frcp_rn(den))"
		}
		body = append(body, fmt.Sprintf("const %s p2 = (%s - (%s * %s));", t, p0, sc("step_size"), q))
		news = []string{"p2", "m2", "v2"}
	case "sgd":
		body = append(body, fmt.Sprintf("%s d = (g + (p * %s));", t, sc("wd")))
		news = []string{"p2"}
		if o.Momentum != 0 || slices.ContainsFunc(o.Groups, func(g runtime.ParamGroup) bool { return g.Momentum != 0 }) {
			buf, err := state("momentum_buffer")
			if err != nil {
				return nil, nil, err
			}
			if rule.Momentum != 0 {
				body = append(body, fmt.Sprintf("const %s b2 = ((%s * %s[i]) + (%s * d));", t, sc("mom"), buf, sc("damp")))
				if o.Nesterov {
					body = append(body, fmt.Sprintf("d = (d + (b2 * %s));", lit(rule.Momentum)))
				} else {
					body = append(body, "d = b2;")
				}
			} else {
				body = append(body, fmt.Sprintf("const %s b2 = %s[i]; // this group keeps no momentum", t, buf))
			}
			news = append(news, "b2")
		}
		body = append(body, fmt.Sprintf("const %s p2 = (p - (%s * d));", t, sc("lr")))
	default:
		return nil, nil, fmt.Errorf("internal error: update check of optimizer %q", o.Kind)
	}
	return body, news, nil
}

// gradNormThreads is the grad-norm kernel's block size.
const gradNormThreads = 256

// gradNorm renders ClipGradNorm's kernel (runtime.GradNormKernel): the
// sum of squares of the flat gradient in double (for f32 gradients it
// cannot overflow: a finite float squared is below 2^256), then
// clip_grad_norm_'s coefficient in the parameters' type as PyTorch
// computes it, max_norm / (norm + 1e-6) clamped to 1, into the status
// block (ops.ClipCoef reads it). A norm that is not finite (f64
// gradients beyond 1e154) fails the step instead: status word 5 = 3, and
// every kernel that commits skips.
//
// max_norm is a run-time scalar (Session.SetClipNorm). +Inf turns
// clipping off, and then the kernel does not run at all: its step is
// runtime.WhileClipping, which the session skips, and the update reads
// the coefficient 1 from its own max_norm (ops.ClipCoef). A model
// compiled with clipping it does not use pays nothing for it, and a norm
// that is not finite cannot fail a step that does not clip
// (clip_grad_norm_ with max_norm=inf scales by 1 too).
//
// One launch over the whole device: each block sums its grid-stride
// share in a shared-memory tree and stores the partial; the last block
// to finish (a ticket in the status block, which the session zeroes
// before each gradient phase) adds the partials in block order. The
// grid depends only on the gradient's size, so the sum runs in one
// order: the same bits on every run and backend. The CPU backend runs it
// with one-thread blocks (SoloBlocks): each block walks its share 256
// elements at a time into red's 256 lanes, the sums its threads would
// hold, and does the tree's additions itself, in the same order.
func gradNorm(k *kernel, plan *runtime.Plan, st *runtime.Step) error {
	o := plan.Optimizer
	gb := -1
	for i, b := range plan.Buffers {
		if b.Role == "grads" {
			gb = i
		}
	}
	if gb < 0 || !o.GradNorm() || st.Src < 0 || st.Src >= len(plan.Buffers) || plan.Buffers[st.Src].DType != runtime.F64 {
		return fmt.Errorf("internal error: grad-norm step without a gradient vector, a ClipNorm or its f64 partials")
	}
	t := map[runtime.DType]string{runtime.F32: "float", runtime.F64: "double"}[plan.Buffers[gb].DType]
	if t == "" {
		return fmt.Errorf("internal error: grad norm of %s gradients", plan.Buffers[gb].DType)
	}
	c := &ops.Ctx{T: t}
	k.name = "ngen_grad_norm_" + t
	k.comment = []string{"clip_grad_norm_: the gradients' global norm, and max_norm / (norm + 1e-6) clamped to 1 into the status block",
		"(a norm that is not finite fails the step)"}
	sb := k.param("int *", "status", runtime.ArgRef{Buf: st.Buf, Kind: runtime.ArgPtr})
	G := k.param("const "+t+" *__restrict__", "grads", runtime.ArgRef{Buf: gb, Kind: runtime.ArgPtr})
	part := k.param("double *", "partials", runtime.ArgRef{Buf: st.Src, Kind: runtime.ArgPtr})
	n := k.runtimeSize(plan.Buffers[gb].Elems)
	k.gridStride, k.sync = false, true
	k.block = [3]int{gradNormThreads, 1, 1}
	// About 16 elements a thread, at most GradNormMaxBlocks blocks.
	k.grid = [3]runtime.Expr{{Size: plan.Buffers[gb].Elems, Div: 16 * gradNormThreads, Max: runtime.GradNormMaxBlocks}, {Size: runtime.Size{Mul: 1}}, {Size: runtime.Size{Mul: 1}}}
	k.soloBlocks = true
	w := &k.body
	// The tree over red's gradNormThreads lanes: thread t adds lane t+h
	// into lane t; a one-thread block does every lane's addition itself,
	// in the same order.
	tree := func() {
		w.WriteString("  __syncthreads();\n")
		fmt.Fprintf(w, "  for (int h = %d; h > 0; h >>= 1) {\n    for (int t = threadIdx.x; t < h; t += blockDim.x) red[t] += red[t + h];\n    __syncthreads();\n  }\n", gradNormThreads/2)
	}
	maxNorm := k.scalar("max_norm", t)
	fmt.Fprintf(w, "  if (%s) return; // the step already failed\n", stepBad(sb))
	fmt.Fprintf(w, "  __shared__ double red[%d];\n", gradNormThreads)
	w.WriteString("  __shared__ int last;\n")
	fmt.Fprintf(w, "  const long long n = %s;\n", n)
	g := G + "[i]"
	if o.Scaler != nil {
		// The norm of the unscaled gradients, as clip_grad_norm_ after
		// scaler.unscale_(opt) sees them: each unscaled in the
		// gradients' type, as the update does (compiler/optimizer.go).
		g = fmt.Sprintf("(%s * %s)", g, k.scalar(runtime.InvScaleScalar, t))
	}
	// Thread t sums elements blockIdx.x·256 + t + k·gridDim.x·256 in k's
	// order. A one-thread block (the CPU's launch, SoloBlocks) keeps the
	// 256 threads' sums in red and walks the same elements 256 at a time,
	// lane by lane: the same additions in the same order, so the same
	// bits as the GPU form, in a loop the host vectorises instead of 256
	// fibers a block.
	w.WriteString("  if (blockDim.x == 1) {\n")
	fmt.Fprintf(w, "    for (int t = 0; t < %d; ++t) red[t] = 0.0;\n", gradNormThreads)
	fmt.Fprintf(w, "    for (long long i0 = (long long)blockIdx.x * %d; i0 < n; i0 += (long long)gridDim.x * %d) {\n", gradNormThreads, gradNormThreads)
	fmt.Fprintf(w, "      const int m = n - i0 < %d ? (int)(n - i0) : %d;\n", gradNormThreads, gradNormThreads)
	fmt.Fprintf(w, "      for (int t = 0; t < m; ++t) { const long long i = i0 + t; const double g = (double)%s; red[t] += g * g; }\n    }\n", g)
	w.WriteString("  } else {\n    double s = 0.0;\n")
	fmt.Fprintf(w, "    for (long long i = (long long)blockIdx.x * %d + threadIdx.x; i < n; i += (long long)gridDim.x * %d) { const double g = (double)%s; s += g * g; }\n",
		gradNormThreads, gradNormThreads, g)
	w.WriteString("    red[threadIdx.x] = s;\n  }\n")
	tree()
	w.WriteString("  if (threadIdx.x == 0) {\n")
	fmt.Fprintf(w, "    %s[blockIdx.x] = red[0];\n", part)
	w.WriteString("    __threadfence();\n")
	fmt.Fprintf(w, "    last = atomicAdd(&%s[%d], 1) == (int)gridDim.x - 1;\n", sb, runtime.StatusNormTicket)
	w.WriteString("  }\n  __syncthreads();\n  if (!last) return;\n")
	w.WriteString("  __threadfence();\n")
	fmt.Fprintf(w, "  for (int t = threadIdx.x; t < %d; t += blockDim.x) {\n", gradNormThreads)
	w.WriteString("    double s = 0.0;\n")
	fmt.Fprintf(w, "    for (int b = t; b < (int)gridDim.x; b += %d) s += ((volatile double *)%s)[b];\n", gradNormThreads, part)
	w.WriteString("    red[t] = s;\n  }\n")
	tree()
	w.WriteString("  if (threadIdx.x != 0) return;\n")
	fmt.Fprintf(w, "  %s[%d] = 0; // the ticket, for the next launch\n", sb, runtime.StatusNormTicket)
	w.WriteString("  const double total = red[0];\n")
	fmt.Fprintf(w, "  if (!(total - total == 0.0)) { atomicMax(&%s[5], 3); return; }\n", sb)
	fmt.Fprintf(w, "  const %s norm = (%s)sqrt(total);\n", t, t)
	fmt.Fprintf(w, "  %s coef = %s / (norm + %s);\n", t, maxNorm, c.Lit(1e-6))
	fmt.Fprintf(w, "  coef = coef < %s ? coef : %s;\n", c.Lit(1), c.Lit(1))
	wd := runtime.StatusClipCoef
	if t == "double" {
		w.WriteString("  const unsigned long long bits = (unsigned long long)__double_as_longlong(coef);\n")
		fmt.Fprintf(w, "  %s[%d] = (int)(unsigned)bits;\n  %s[%d] = (int)(unsigned)(bits >> 32);\n", sb, wd, sb, wd+1)
	} else {
		fmt.Fprintf(w, "  %s[%d] = __float_as_int(coef);\n", sb, wd)
	}
	return nil
}
