package codegen

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
)

// kernel is one kernel being rendered: its parameters (with the plan
// arguments that feed them) and its body. The kernel templates
// (elementwise.go, reduce.go, crossentropy.go) fill it; render prints the
// CUDA C with the signature and launch description in one place.
type kernel struct {
	// name says what the kernel computes (layernorm_fwd); label names
	// this launch (blocks_1_norm1_layernorm_fwd). Neither is part of the
	// kernel's identity (canonical).
	name, label string
	comment     []string
	params      []kparam
	byName      map[string]int
	body        strings.Builder
	sync        bool
	// gridStride: the body is one NGEN_GRID_STRIDE loop (KernelInfo.GridStride).
	gridStride bool
	// soloBlocks: the kernel runs with one-thread blocks too (KernelInfo.SoloBlocks).
	soloBlocks bool
	// steps: launches of a stepped loop (KernelInfo.Steps).
	steps int
	// rowLen, when non-zero, is the row length of the kernel's
	// NGEN_GRID_STRIDE_ROWS loop (row r, column j).
	rowLen int
	// keptIndex, in a reduction, gives the index of an input that is
	// constant along every reduced axis in terms of the kept index o.
	keptIndex func(in ir.Shape) (string, bool)
	nimm      int // constants declared (imm)
	// target is what the kernel is rendered for (ops.Target).
	target ops.Target
	// raw names the 16-bit variables a Moves gather declared in their
	// storage type (ops.Def.Moves): stores copy them as they are.
	raw   map[*ir.Value]string
	grid  [3]runtime.Expr
	block [3]int
	t     string // element type of the group
	// plan is the plan the kernel is rendered for (the clock's slots).
	plan *runtime.Plan
	// pro declares the scalars read from the clock, printed first in
	// the body: locals the loops read as they read parameters.
	pro []string
	// pre is file-scope code the kernel needs (device globals), printed
	// before it; "$K" in pre and body stands for the kernel's final name.
	pre string
}

type kparam struct {
	ctype string
	name  string
	ref   runtime.ArgRef
}

func newKernel(p *compiler.Program, g *compiler.Group, target ops.Target) *kernel {
	k := &kernel{name: g.Kernel, label: g.Name, target: target, byName: map[string]int{}, block: [3]int{256, 1, 1}, plan: p.Plan}
	k.t = g.Root.DType.CType()
	if g.Kind == compiler.CE {
		k.t = g.Root.Args[0].DType.CType()
	}
	for _, v := range g.Values {
		k.comment = append(k.comment, v.LongString())
	}
	return k
}

func (k *kernel) param(ctype, name string, ref runtime.ArgRef) string {
	if _, ok := k.byName[name]; ok {
		return name
	}
	k.byName[name] = len(k.params)
	k.params = append(k.params, kparam{ctype, name, ref})
	return name
}

// scalar declares a runtime scalar parameter and returns its C name, or,
// for a scalar the plan's clock holds (runtime.ClockSlot: everything that
// changes from step to step), its read from the clock: the launch's
// arguments then stay the same from step to step.
func (k *kernel) scalar(name, ctype string) string {
	if c := k.clockSlot(name, ctype); c != "" {
		return c
	}
	cname := "s_" + compiler.Sanitize(name)
	if name == "B" {
		cname = "B"
	}
	kind := runtime.ArgF32
	switch ctype {
	case "int":
		kind = runtime.ArgI32
	case "long long":
		kind = runtime.ArgI64
	case "unsigned long long":
		kind = runtime.ArgU64
	case "double":
		kind = runtime.ArgF64
	}
	return k.param(ctype, cname, runtime.ArgRef{Buf: -1, Scalar: name, Kind: kind})
}

// imm declares a per-launch constant parameter holding v and returns its
// C name. The kernel's text then says c0, not the number, so launches
// that differ only in it (the Philox stream of each layer's dropout) share
// the kernel. A value asked for twice is one parameter.
func (k *kernel) imm(v int64) string {
	key := fmt.Sprintf("imm %d", v)
	if i, ok := k.byName[key]; ok {
		return k.params[i].name
	}
	name := fmt.Sprintf("c%d", k.nimm)
	k.nimm++
	k.byName[key] = len(k.params)
	k.params = append(k.params, kparam{"int", name, runtime.ArgRef{Buf: -1, Kind: runtime.ArgI32, Const: v}})
	return name
}

// dim renders one dimension as C, declaring its symbol.
func (k *kernel) dim(d ir.Dim) string {
	if d.Sym != "" {
		return "(long long)" + k.scalar(d.Sym, "int")
	}
	return fmt.Sprintf("%dLL", d.N)
}

// size renders an element count as C.
func (k *kernel) size(s ir.Shape) string {
	parts := []string{}
	n := int64(1)
	for _, d := range s {
		if d.Sym != "" {
			parts = append(parts, k.dim(d))
		} else {
			n *= int64(d.N)
		}
	}
	if n != 1 || len(parts) == 0 {
		parts = append([]string{fmt.Sprintf("%dLL", n)}, parts...)
	}
	return strings.Join(parts, " * ")
}

// ctx is the ops expression context for this kernel.
func (k *kernel) ctx(t, index string) *ops.Ctx {
	c := &ops.Ctx{Target: k.target, T: t, Index: index, Scalar: func(name, ctype string) string {
		if ctype == "" {
			ctype = t
		}
		return k.scalar(name, ctype)
	}, Dim: k.dim, Imm: k.imm}
	if k.rowLen > 0 {
		c.Row, c.Col, c.RowLen = "r", "j", k.rowLen
	}
	return c
}

// status declares the plan's status word as a parameter and returns its
// C name and the code the memory plan gave op v's check (a constant
// parameter: the same op of another layer has its own code).
func (k *kernel) status(p *compiler.Program, v *ir.Value) (string, string) {
	for _, c := range p.Plan.Checks {
		if c.Kind == "status" && c.Op == v.Op && c.Pos == v.Pos.String() {
			return k.param("int *", "status", runtime.ArgRef{Buf: c.Buf, Kind: runtime.ArgPtr}), k.imm(int64(c.Code))
		}
	}
	panic(fmt.Sprintf("codegen: kernel %s: %s has no status check", k.name, v))
}

// bcastIndex maps a linear index over space to the linear index of a value
// of shape in that broadcasts to space.
func (k *kernel) bcastIndex(space, in ir.Shape, idx string) string {
	if len(in) == len(space) {
		if s := ir.Shape(space[len(space)-len(in):]); s.Eq(in) {
			return idx
		}
	}
	if z := in.Size(); z.N == 1 && len(z.Syms) == 0 {
		return "0"
	}
	lead := len(space) - len(in)
	// in matches a suffix of space: idx % size(in).
	suffix := true
	for i := range in {
		if in[i] != space[lead+i] {
			suffix = false
		}
	}
	if suffix {
		return fmt.Sprintf("(%s %% (%s))", idx, k.size(in))
	}
	// General case: decompose idx into coordinates of space, dividing as
	// unsigned (idx is non-negative), which costs less than signed 64-bit
	// division by a constant.
	var terms []string
	stride := ir.Shape{}
	rem := "(unsigned long long)(" + idx + ")"
	for i := len(space) - 1; i >= 0; i-- {
		coord := fmt.Sprintf("((%s) %% %s)", rem, k.dim(space[i]))
		if i == 0 {
			coord = "(" + rem + ")"
		}
		j := i - lead
		if j >= 0 && in[j] != ir.D(1) {
			if len(stride) == 0 {
				terms = append(terms, coord)
			} else {
				terms = append(terms, fmt.Sprintf("%s * (%s)", coord, k.size(stride)))
			}
		}
		if j >= 0 {
			stride = append(ir.Shape{in[j]}, stride...)
		}
		rem = fmt.Sprintf("(%s) / %s", rem, k.dim(space[i]))
	}
	if len(terms) == 0 {
		return "0"
	}
	return "(long long)(" + strings.Join(terms, " + ") + ")"
}

// exprs holds the C expression of each value a prologue computes or loads.
type exprs map[*ir.Value]string

// stmt is one statement of a prologue: its indented, newline-terminated
// text (one line, or a gather template's several), the value it defines
// and whether it reads an input buffer. Callers place their stores by
// these facts, not by reading the text back.
type stmt struct {
	text string
	def  *ir.Value
	load bool
}

// stmts is a prologue in emission order.
type stmts []stmt

// writeTo appends the statements' text to w.
func (b stmts) writeTo(w *strings.Builder) {
	for _, s := range b {
		w.WriteString(s.text)
	}
}

// stored is the C expression a store of v writes: v's 16-bit variable
// where a Moves gather declared one, else its value e[v].
func (k *kernel) stored(v *ir.Value, e exprs) string {
	if r, ok := k.raw[v]; ok {
		return r
	}
	return e[v]
}

// halfToFloat names the function that widens a 16-bit type's element.
func halfToFloat(d ir.DType) string {
	if d == ir.F16 {
		return "__half2float"
	}
	return "__bfloat162float"
}

// elementwise appends to b, for linear index idx over the group's space,
// loads of the group's inputs and the computation of its elementwise
// members, and returns the C expression of every value.
func (k *kernel) elementwise(p *compiler.Program, g *compiler.Group, in map[*ir.Value]string, idx, indent string, b *stmts) exprs {
	e := exprs{}
	member := map[*ir.Value]bool{}
	for _, v := range g.Values {
		member[v] = true
	}
	memberName := func(v *ir.Value) (string, bool) {
		s, ok := e[v]
		return s, ok && member[v]
	}
	for _, v := range g.Values {
		d := ops.Lookup(v.Op)
		if d.Kind == ops.Gather {
			args := make([]string, len(v.Args))
			for i, a := range v.Args {
				if i < len(d.Indexed) && d.Indexed[i] {
					ptr, ok := in[a]
					if !ok {
						panic(fmt.Sprintf("codegen: kernel %s: %s indexes %s, which is not in global memory", g.Name, v, a))
					}
					args[i] = ptr
					continue
				}
				args[i] = k.operand(g, a, in, e, idx, indent, b)
			}
			c := k.ctx(v.DType.CType(), idx)
			c.Member = memberName
			c.Status = func(v *ir.Value) (string, string) { return k.status(p, v) }
			raw := d.MovesValue(v) && v.DType.IsHalf()
			for _, a := range v.Args {
				// The moved arguments have the result's type; others
				// (maxpool_bwd's window indices) are not floats.
				raw = raw && (a.DType == v.DType || !a.DType.IsFloat())
			}
			if raw {
				c.Raw = v.DType.StorageCType()
			}
			out := fmt.Sprintf("v%d", v.ID)
			var text strings.Builder
			for _, line := range strings.Split(strings.TrimRight(d.Gather(c, v, args, out), "\n"), "\n") {
				text.WriteString(indent + line + "\n")
			}
			switch {
			case raw:
				// The template copied 16-bit elements (ops.Def.Moves): a
				// store copies the bits again, and readers in the kernel
				// take the exact float (no rounding: it is a 16-bit value).
				if k.raw == nil {
					k.raw = map[*ir.Value]string{}
				}
				k.raw[v] = out
				out = halfToFloat(v.DType) + "(" + out + ")"
			case v.DType.IsHalf():
				// A 16-bit result (a pooling's, col2im's sum) is rounded
				// where it is computed, as an elementwise one is.
				r := out + "_" + v.DType.String()
				fmt.Fprintf(&text, "%sconst float %s = ngen_round_%s(%s);\n", indent, r, v.DType, out)
				out = r
			}
			// The template reads its indexed inputs through their pointers.
			*b = append(*b, stmt{text: text.String(), def: v, load: true})
			e[v] = out
			continue
		}
		if d.Kind != ops.Elementwise {
			continue
		}
		args := make([]string, len(v.Args))
		for i, a := range v.Args {
			args[i] = k.operand(g, a, in, e, idx, indent, b)
		}
		c := k.ctx(v.DType.CType(), idx)
		c.StatusBlock = func() string {
			st := statusBuffer(p.Plan)
			if st < 0 {
				panic(fmt.Sprintf("codegen: kernel %s: %s reads the status block, which the plan lacks", g.Name, v))
			}
			return k.param("const int *", "status", runtime.ArgRef{Buf: st, Kind: runtime.ArgPtr})
		}
		expr := d.Expr(c, v, args)
		if v.DType.IsHalf() && !d.SelectsExact(v) {
			// A 16-bit value is rounded where it is computed, stored or
			// not, so a fused kernel computes what -fuse=none does (a
			// value that selects a 16-bit argument is one already).
			expr = "ngen_round_" + v.DType.String() + "(" + expr + ")"
		}
		*b = append(*b, stmt{text: fmt.Sprintf("%s%s v%d = %s;\n", indent, v.DType.CType(), v.ID, expr), def: v})
		e[v] = fmt.Sprintf("v%d", v.ID)
	}
	return e
}

// operand renders an argument inside a group: a member, a constant, a
// runtime scalar, or a (broadcast) load of an input, which it appends to b.
func (k *kernel) operand(g *compiler.Group, a *ir.Value, in map[*ir.Value]string, e exprs, idx, indent string, b *stmts) string {
	if s, ok := e[a]; ok {
		return s
	}
	switch {
	case a.Op == "fill":
		return k.ctx(a.DType.CType(), idx).Lit(a.Attrs.F)
	case a.Role == ir.Scalar:
		return k.scalar(a.Name, a.DType.CType())
	}
	ptr, ok := in[a]
	if !ok {
		panic(fmt.Sprintf("codegen: kernel %s: %s is neither member nor input", g.Name, a))
	}
	name := fmt.Sprintf("a%d", a.ID)
	at := k.bcastIndex(g.Space, a.Shape, idx)
	if k.rowLen > 0 && at != idx && at != "0" {
		if ri, ok := k.rowIndex(g.Space, a.Shape, k.rowLen); ok {
			at = ri
		}
	}
	if k.keptIndex != nil && at != idx && at != "0" {
		if ki, ok := k.keptIndex(a.Shape); ok {
			at = ki
		}
	}
	// A 16-bit element widens to float exactly; stores of one narrow
	// through its type's constructor, __float2bfloat16_rn (or
	// __float2half_rn) in CUDA's headers and in ngen_half.h.
	*b = append(*b, stmt{text: fmt.Sprintf("%s%s %s = %s[%s];\n", indent, a.DType.CType(), name, ptr, at), def: a, load: true})
	e[a] = name
	return name
}

// buffers declares pointer parameters for the group's inputs and outputs.
func (k *kernel) buffers(p *compiler.Program, g *compiler.Group) (in, out map[*ir.Value]string) {
	in, out = map[*ir.Value]string{}, map[*ir.Value]string{}
	// Outputs may share storage with inputs (in-place optimizer updates),
	// so __restrict__ is only promised when no storage is shared.
	bases := map[int]bool{}
	for _, v := range g.Outputs {
		bases[baseBuf(p.Plan, p.BufOf[v])] = true
	}
	restrict := true
	for _, v := range g.Inputs {
		if bases[baseBuf(p.Plan, p.BufOf[v])] {
			restrict = false
		}
	}
	r := ""
	if restrict {
		r = " __restrict__"
	}
	for i, v := range g.Inputs {
		if v.Role == ir.Scalar || v.Op == "fill" {
			continue
		}
		in[v] = k.param("const "+v.DType.StorageCType()+" *"+r, fmt.Sprintf("in%d", i), runtime.ArgRef{Buf: p.BufOf[v], Kind: runtime.ArgPtr})
	}
	for i, v := range g.Outputs {
		out[v] = k.param(v.DType.StorageCType()+" *"+r, fmt.Sprintf("out%d", i), runtime.ArgRef{Buf: p.BufOf[v], Kind: runtime.ArgPtr})
	}
	return in, out
}

// baseBuf follows aliases to the buffer owning the storage.
func baseBuf(pl *runtime.Plan, i int) int {
	for pl.Buffers[i].Placement == runtime.Alias {
		i = pl.Buffers[i].AliasOf
	}
	return i
}

// canonical is the kernel's identity: its text without comments and with
// "$K" for its name. Parameters are named by position (in0, out1, c0) and
// sizes are literals, so two launches have one canonical text exactly when
// one compiled kernel serves both.
func (k *kernel) canonical() string {
	return fmt.Sprintf("%v %v %v %v %d\n%s", k.sync, k.gridStride, k.soloBlocks, k.block, k.steps, renumberValues(k.code("$K", false)))
}

// renumberValues renames the kernel's locals named after IR values (v17,
// a12, v17_c0: the value's ID, which differs between layers) by order of
// first appearance, so that only the computation tells kernels apart.
func renumberValues(src string) string {
	var b strings.Builder
	ids := map[string]int{}
	word := func(c byte) bool {
		return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
	}
	for i := 0; i < len(src); {
		c := src[i]
		if (c == 'v' || c == 'a') && (i == 0 || !word(src[i-1])) {
			j := i + 1
			for j < len(src) && '0' <= src[j] && src[j] <= '9' {
				j++
			}
			if j > i+1 && (j == len(src) || src[j] == '_' || !word(src[j])) {
				n, ok := ids[src[i:j]]
				if !ok {
					n = len(ids)
					ids[src[i:j]] = n
				}
				fmt.Fprintf(&b, "%c%d", c, n)
				i = j
				continue
			}
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}

// render prints the kernel under name, with the IR values of its first
// launch as a comment and, when it is shared, the labels of every launch.
func (k *kernel) render(name string, labels []string) string {
	var b strings.Builder
	if len(labels) > 1 {
		fmt.Fprintf(&b, "// %s: %d launches (%s). The first computes:\n", name, len(labels), strings.Join(labels, ", "))
	} else {
		fmt.Fprintf(&b, "// %s computes:\n", name)
	}
	for _, c := range k.comment {
		fmt.Fprintf(&b, "//   %s\n", c)
	}
	b.WriteString(k.code(name, k.target != ops.CUDA))
	return b.String()
}

// code prints the kernel's C under name, without comments: a __global__
// kernel, or for a host form (host) an ordinary function of the host glue.
func (k *kernel) code(name string, host bool) string {
	var b strings.Builder
	var ps []string
	for _, p := range k.params {
		sep := " "
		if strings.HasSuffix(p.ctype, "*") {
			sep = ""
		}
		ps = append(ps, p.ctype+sep+p.name)
	}
	b.WriteString(strings.ReplaceAll(k.pre, "$K", name))
	if host {
		fmt.Fprintf(&b, "NGEN_HOST_FORM void %s(%s) {\n", name, strings.Join(ps, ", "))
	} else {
		fmt.Fprintf(&b, "extern \"C\" __global__ void __launch_bounds__(%d) %s(%s) {\n", k.block[0]*k.block[1]*k.block[2], name, strings.Join(ps, ", "))
	}
	for _, l := range k.pro {
		b.WriteString(l)
	}
	b.WriteString(strings.ReplaceAll(k.body.String(), "$K", name))
	b.WriteString("}\n")
	return b.String()
}

// info is the kernel's launch description for the plan.
func (k *kernel) info(name string) runtime.KernelInfo {
	ki := runtime.KernelInfo{Name: name, Sync: k.sync, GridStride: k.gridStride, SoloBlocks: k.soloBlocks, Steps: k.steps}
	for _, p := range k.params {
		ki.Params = append(ki.Params, p.ref.Kind)
	}
	return ki
}

func (k *kernel) args() []runtime.ArgRef {
	var out []runtime.ArgRef
	for _, p := range k.params {
		out = append(out, p.ref)
	}
	return out
}

func gridFor(space ir.Shape, block int) [3]runtime.Expr {
	z := space.Size()
	return [3]runtime.Expr{
		{Size: runtime.Size{Mul: z.N, Syms: z.Syms}, Div: int64(block), Max: 1 << 20},
		{Size: runtime.Size{Mul: 1}},
		{Size: runtime.Size{Mul: 1}},
	}
}
