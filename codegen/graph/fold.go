package graph

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/runtime"
)

// Folding repeated layers. A deep model repeats one layer's kernels:
// forward, the same sequence of steps per layer; backward, the reversed
// one. The picture draws a maximal run of c identical copies of a
// sequence once, in a cluster marked ×c.
//
// Two steps are the same when they run the same kernel (Step.Kernel; for a
// GEMM, the same shapes and flags), or when their structure is the same:
// the ops of each step with their dtypes, shapes and attributes, and where
// each argument comes from (a member of the step, or from outside with its
// role and type), with every name left out, so fc2's and fc3's kernels
// match. Today every layer has kernels of its own and the structure is
// what matches; once identical kernels are shared between layers, the
// kernel index says it directly.

// fold says which steps are drawn.
type fold struct {
	// rep[i] is the step drawn for step i: i itself, or the step at the
	// same place in the first copy of i's folded run.
	rep []int
	// blocks are the folded runs in step order; blockOf[i] is the block
	// holding step i, or -1.
	blocks  []block
	blockOf []int
}

// block is a folded run: count copies of unit steps from start.
type block struct{ start, unit, count int }

// copies lists the steps that rep stands for: rep itself first.
func (f fold) copies(rep int) []int {
	b := f.blockOf[rep]
	if b < 0 || f.rep[rep] != rep {
		return []int{rep}
	}
	bl := f.blocks[b]
	off := rep - bl.start
	var out []int
	for c := 0; c < bl.count; c++ {
		out = append(out, bl.start+c*bl.unit+off)
	}
	return out
}

func noFold(n int) fold {
	f := fold{rep: make([]int, n), blockOf: make([]int, n)}
	for i := range f.rep {
		f.rep[i], f.blockOf[i] = i, -1
	}
	return f
}

// findFolds finds the folded runs of m's steps: within each phase, the
// choice of runs that leaves the fewest steps drawn, and among those the
// one whose runs start where a new layer's parameters are first read.
func findFolds(m *model) fold {
	n := len(m.steps)
	class := m.classes()
	starts := m.layerStarts()
	f := noFold(n)
	for a := 0; a < n; {
		b := a
		for b < n && m.steps[b].phase == m.steps[a].phase {
			b++
		}
		for _, bl := range foldSegment(class[a:b], starts[a:b]) {
			bl.start += a
			f.add(bl)
		}
		a = b
	}
	return f
}

func (f *fold) add(bl block) {
	id := len(f.blocks)
	f.blocks = append(f.blocks, bl)
	for c := 0; c < bl.count; c++ {
		for k := 0; k < bl.unit; k++ {
			i := bl.start + c*bl.unit + k
			f.rep[i] = bl.start + k
			f.blockOf[i] = id
		}
	}
}

// foldSegment chooses the folded runs of one phase's steps, s being
// their classes (equal classes: the same step), by dynamic programming
// over the suffixes. A run's unit is at least two steps (a layer is at
// least a GEMM and its epilogue), so two unrelated steps that happen to
// have one shape do not fold.
func foldSegment(s []int, layerStart []bool) []block {
	n := len(s)
	type score struct{ drawn, unaligned int }
	less := func(a, b score) bool {
		return a.drawn < b.drawn || (a.drawn == b.drawn && a.unaligned < b.unaligned)
	}
	best := make([]score, n+1)
	choice := make([]block, n+1)
	// same[L][i] is how many steps from i on equal the step L later.
	same := make([][]int32, n/2+1)
	for L := 1; L <= n/2; L++ {
		same[L] = make([]int32, n+1)
		for i := n - L - 1; i >= 0; i-- {
			if s[i] == s[i+L] {
				same[L][i] = same[L][i+1] + 1
			}
		}
	}
	for i := n - 1; i >= 0; i-- {
		best[i] = score{best[i+1].drawn + 1, best[i+1].unaligned}
		choice[i] = block{i, 1, 1}
		for L := 2; i+2*L <= n; L++ {
			if !primitive(same, i, L) {
				continue // a repeat of a shorter unit, which is tried on its own
			}
			maxCopies := 1 + int(same[L][i])/L
			un := 0
			if !layerStart[i] {
				un = 1
			}
			for c := maxCopies; c >= 2; c-- {
				sc := score{best[i+c*L].drawn + L, best[i+c*L].unaligned + un}
				// On a tie, fold here rather than later: the run then
				// starts with the layer's first step.
				if !less(best[i], sc) && (choice[i].count == 1 || less(sc, best[i])) {
					best[i], choice[i] = sc, block{i, L, c}
				}
			}
		}
	}
	var out []block
	for i := 0; i < n; {
		c := choice[i]
		if c.count > 1 {
			out = append(out, c)
		}
		i += c.unit * c.count
	}
	return out
}

// primitive reports whether the unit of L steps from i is not itself a
// repeat of a shorter unit (period d dividing L).
func primitive(same [][]int32, i, L int) bool {
	for d := 1; d < L; d++ {
		if L%d == 0 && int(same[d][i]) >= L-d {
			return false
		}
	}
	return true
}

// classes numbers the steps so that the same step (by kernel identity or
// by structure) gets the same number.
func (m *model) classes() []int {
	n := len(m.steps)
	parent := make([]int, n)
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(byKey map[string]int, key string, i int) {
		if j, ok := byKey[key]; ok {
			parent[find(i)] = find(j)
		} else {
			byKey[key] = i
		}
	}
	bySig, byKernel := map[string]int{}, map[string]int{}
	for i := range m.steps {
		union(bySig, m.signature(&m.steps[i]), i)
		if k := kernelIdentity(m.steps[i].st, m.plan); k != "" {
			union(byKernel, k, i)
		}
	}
	out := make([]int, n)
	for i := range out {
		out[i] = find(i)
	}
	return out
}

// kernelIdentity is what a step runs: its kernel, or a GEMM's shapes and
// flags; "" for memsets and copies.
func kernelIdentity(st *runtime.Step, plan *runtime.Plan) string {
	switch st.Kind {
	case runtime.LaunchStep:
		return fmt.Sprintf("kernel %d", st.Kernel)
	case runtime.GemmStep:
		g := st.Gemm
		dt := runtime.F32
		if g.C >= 0 && g.C < len(plan.Buffers) {
			dt = plan.Buffers[g.C].DType
		}
		return fmt.Sprintf("gemm %v %v %v M=%v N=%v K=%v batch=%v %v %v %v %v sum=%v",
			dt, g.TransA, g.TransB, g.M, g.N, g.K, g.Batch, g.BatchA, g.BatchB, g.Alpha, g.Beta, g.SumBatch)
	}
	return ""
}

// signature is a step's structure with every name left out.
func (m *model) signature(s *step) string {
	var b strings.Builder
	st := s.st
	fmt.Fprintf(&b, "%d|%s|", st.Kind, st.Builtin)
	switch st.Kind {
	case runtime.MemsetStep, runtime.CopyStep:
		buf := m.plan.Buffers[st.Buf]
		fmt.Fprintf(&b, "%v %v", buf.DType, buf.Elems)
		return b.String()
	}
	g := s.group
	if g == nil {
		b.WriteString(st.Ops)
		return b.String()
	}
	at := map[*ir.Value]int{}
	for i, v := range g.Values {
		at[v] = i
	}
	fmt.Fprintf(&b, "%v %v", g.Kind, g.Space)
	for _, v := range g.Values {
		a := v.Attrs
		// Attrs.I is the dropout stream, which differs per layer by design.
		fmt.Fprintf(&b, "\n%s %s %s %s axes=%v keep=%v t=%v,%v f=%v,%v shape=%v perm=%v ints=%v str=%q floats=%v (",
			v.Op, v.DType, v.Shape, v.Phase, a.Axes, a.KeepDim, a.TransA, a.TransB, a.F, a.F2, a.Shape, a.Perm, a.Ints, a.Str, a.Floats)
		for _, arg := range v.Args {
			if k, ok := at[arg]; ok {
				fmt.Fprintf(&b, " #%d", k)
			} else {
				fmt.Fprintf(&b, " %s:%s", arg.Role, arg.Type())
			}
		}
		b.WriteString(" )")
	}
	return b.String()
}

// layerStarts marks the steps where a layer begins: the first step that
// reads a parameter of another layer than the previous such step read
// (blocks.1 after blocks.0: a layer is a parameter's name up to its first
// numeric part, or without its last part).
func (m *model) layerStarts() []bool {
	out := make([]bool, len(m.steps))
	last := ""
	for i := range m.steps {
		l := layerOf(m.steps[i].group)
		if l != "" && l != last {
			out[i] = true
		}
		if l != "" {
			last = l
		}
	}
	return out
}

// layerOf is the layer of the first parameter a group reads (fc1 for
// fc1.weight), or "".
func layerOf(g *compiler.Group) string {
	if g == nil {
		return ""
	}
	for _, v := range g.Values {
		for _, a := range v.Args {
			for a.Op == "reshape" {
				a = a.Args[0]
			}
			if a.Role == ir.Param {
				return layerName(a.Name)
			}
		}
	}
	return ""
}

// layerName is the layer of a parameter: blocks.3 for
// blocks.3.self_attn.in_proj_weight, fc1 for fc1.weight.
func layerName(param string) string {
	parts := strings.Split(param, ".")
	for i, p := range parts {
		if i > 0 && p != "" && strings.Trim(p, "0123456789") == "" {
			return strings.Join(parts[:i+1], ".")
		}
	}
	if len(parts) > 1 {
		return strings.Join(parts[:len(parts)-1], ".")
	}
	return param
}
