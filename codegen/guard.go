package codegen

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler"
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
	k := &kernel{byName: map[string]int{}, block: [3]int{256, 1, 1}, gridStride: true}
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
		w.WriteString("  int bad = 0;\n")
		fmt.Fprintf(w, "  const long long n = %s;\n", n)
		fmt.Fprintf(w, "  NGEN_GRID_STRIDE(i, n) { const %s u = %s(%s[i]); bad |= (u & %s) == %s; }\n", ut, bitsOf, g, mask, mask)
		fmt.Fprintf(w, "  if (bad) atomicMax(&%s[5], 1);\n", sb)
		w.WriteString("  if (blockIdx.x == 0 && threadIdx.x == 0) {\n")
		fmt.Fprintf(w, "    const double l = (double)%s[0];\n", l)
		fmt.Fprintf(w, "    if (!(l - l == 0.0)) atomicMax(&%s[4], 1);\n", sb)
		w.WriteString("    const long long bits = __double_as_longlong(l);\n")
		fmt.Fprintf(w, "    %s[6] = (int)(unsigned)(unsigned long long)bits;\n", sb)
		fmt.Fprintf(w, "    %s[7] = (int)(unsigned)((unsigned long long)bits >> 32);\n", sb)
		w.WriteString("  }\n")
	case runtime.CommitKernel:
		t := ctype(st.Buf)
		k.name = "ngen_commit_" + t
		k.comment = []string{"state ← its new value, unless the step failed"}
		sb := k.param("const int *", "status", runtime.ArgRef{Buf: status, Kind: runtime.ArgPtr})
		d := k.param(t+" *__restrict__", "dst", runtime.ArgRef{Buf: st.Buf, Kind: runtime.ArgPtr})
		s := k.param("const "+t+" *__restrict__", "src", runtime.ArgRef{Buf: st.Src, Kind: runtime.ArgPtr})
		el := plan.Buffers[st.Buf].Elems
		k.grid = [3]runtime.Expr{{Size: el, Div: 256, Max: 1 << 20}, {Size: runtime.Size{Mul: 1}}, {Size: runtime.Size{Mul: 1}}}
		fmt.Fprintf(w, "  if (%s) return;\n", stepBad(sb))
		fmt.Fprintf(w, "  const long long n = %s;\n", k.runtimeSize(el))
		fmt.Fprintf(w, "  NGEN_GRID_STRIDE(i, n) { %s[i] = %s[i]; }\n", d, s)
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
