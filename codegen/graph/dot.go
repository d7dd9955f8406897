package graph

import (
	"bytes"
	"fmt"
	"html"
	"sort"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// colours per category: fill and border of a kernel's cluster.
var colours = [...]struct{ fill, border string }{
	catGEMM:        {"#d0e2ff", "#1f5fbf"},
	catElementwise: {"#d8f3dc", "#2b8a3e"},
	catReduction:   {"#ffe8cc", "#d9480f"},
	catAttention:   {"#f3d9fa", "#862e9c"},
	catRecurrence:  {"#c5f6fa", "#0b7285"},
	catMemory:      {"#e9ecef", "#868e96"},
}

// Sources: parameters are gold and 3-D, inputs white ellipses, state
// (optimizer moments, running statistics) grey folders.
const (
	paramFill = "#ffd43b"
	stateFill = "#dee2e6"
)

var phaseFill = [...]string{forward: "#f3f8ff", backward: "#fff5f5", optimizer: "#f4fcf4"}

// writer accumulates the DOT text and the edges, deduplicated.
type writer struct {
	m     *model
	f     fold
	buf   bytes.Buffer
	edges map[[2]string]bool
	elist []string
	// sources are the inputs, parameters and state drawn, with the names
	// of the folded copies' sources each stands for.
	sources map[*ir.Value][]string
	flats   map[*ir.Value]bool
}

func (m *model) write(f fold) []byte {
	w := &writer{m: m, f: f, edges: map[[2]string]bool{}, sources: map[*ir.Value][]string{}, flats: map[*ir.Value]bool{}}
	r := m.report
	mode := "fused"
	if !m.prog.Fuse {
		mode = "unfused (-fuse=none)"
	}
	graphs := "eager calls"
	if r.GPU.Graphs {
		graphs = "one CUDA graph"
	}
	title := fmt.Sprintf("<B>%s</B>: %s training step at batch %d<BR/>"+
		"%d kernels, %d GEMMs, %d device calls; %s moved, %s; modeled %.1f µs on %s (%s)",
		esc(m.prog.Model.Name), mode, r.Batch, r.Kernels, r.Gemms, r.DeviceCalls,
		human(float64(r.Bytes), "B"), human(float64(r.Flops), "FLOP"), r.GPUModelUs, esc(r.GPU.Device), graphs)
	if n := len(f.blocks); n > 0 {
		folded := 0
		for _, b := range f.blocks {
			folded += b.unit * (b.count - 1)
		}
		title += fmt.Sprintf("<BR/>%d repeated runs folded (×count): %d of %d steps not drawn", n, folded, len(m.steps))
	}
	fmt.Fprintf(&w.buf, "digraph %s {\n", quote(m.prog.Model.Name))
	fmt.Fprintf(&w.buf, "  graph [label=<%s>, labelloc=t, fontname=\"Helvetica\", fontsize=14, rankdir=TB, newrank=true, compound=true, nodesep=0.2, ranksep=0.3, bgcolor=\"white\"];\n", title)
	w.buf.WriteString("  node [fontname=\"Helvetica\", fontsize=10, shape=box, style=\"rounded,filled\", fillcolor=\"white\", height=0.3, margin=\"0.08,0.03\"];\n")
	w.buf.WriteString("  edge [fontname=\"Helvetica\", fontsize=8, color=\"#495057\", fontcolor=\"#495057\", arrowsize=0.6];\n")
	w.legend()
	w.edgesOfSteps() // first: it finds the sources and flat views to draw
	for ph := forward; ph <= optimizer; ph++ {
		w.phase(ph)
	}
	w.writeSources()
	for _, e := range w.elist {
		w.buf.WriteString(e)
	}
	w.buf.WriteString("}\n")
	return w.buf.Bytes()
}

func (w *writer) legend() {
	var b strings.Builder
	b.WriteString(`<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="4"><TR>`)
	for c := catGEMM; c <= catMemory; c++ {
		fmt.Fprintf(&b, `<TD BGCOLOR="%s">%s</TD>`, colours[c].fill, catNames[c])
	}
	fmt.Fprintf(&b, `<TD BGCOLOR="%s">parameter</TD><TD>input</TD><TD BGCOLOR="%s">state</TD>`, paramFill, stateFill)
	b.WriteString(`</TR><TR><TD COLSPAN="9" BORDER="0">a cluster is one kernel or GEMM: the IR ops fused into it; bytes moved, FLOPs, modeled GPU time.<BR/>`)
	b.WriteString(`Labelled edges go through global memory (dtype and shape read); unlabelled ones stay inside a kernel.</TD></TR></TABLE>`)
	fmt.Fprintf(&w.buf, "  legend [shape=plaintext, style=\"\", fontsize=9, label=<%s>];\n", b.String())
}

// phase writes the region of one phase: its drawn steps, folded runs in
// clusters of their own.
func (w *writer) phase(ph phase) {
	var drawn []int
	for i, s := range w.m.steps {
		if s.phase == ph && w.f.rep[i] == i {
			drawn = append(drawn, i)
		}
	}
	if len(drawn) == 0 {
		return
	}
	fmt.Fprintf(&w.buf, "  subgraph cluster_%s {\n    label=<<B>%s</B>>; labeljust=l; fontsize=13; style=\"filled\"; fillcolor=%s; color=\"#adb5bd\";\n",
		strings.Fields(phaseNames[ph])[0], phaseNames[ph], quote(phaseFill[ph]))
	open := -1
	for _, i := range drawn {
		b := w.f.blockOf[i]
		if b != open && open >= 0 {
			w.buf.WriteString("    }\n")
			open = -1
		}
		if b >= 0 && b != open {
			bl := w.f.blocks[b]
			fmt.Fprintf(&w.buf, "    subgraph cluster_fold%d {\n      label=<<B>×%d</B> identical runs of %d steps (%s)>; labeljust=r; style=\"dashed,rounded\"; color=\"#343a40\"; penwidth=1.5; fontsize=12;\n",
				b, bl.count, bl.unit, esc(w.foldSpan(bl)))
			open = b
		}
		w.step(i)
	}
	if open >= 0 {
		w.buf.WriteString("    }\n")
	}
	w.flatNodes(ph)
	w.buf.WriteString("  }\n")
}

// foldSpan names the first and last copy of a folded run by their first
// steps' layers or labels.
func (w *writer) foldSpan(bl block) string {
	name := func(c int) string {
		for k := 0; k < bl.unit; k++ {
			if l := layerOf(w.m.steps[bl.start+c*bl.unit+k].group); l != "" {
				return l
			}
		}
		return w.m.steps[bl.start+c*bl.unit].label
	}
	return name(0) + " … " + name(bl.count-1)
}

// step writes one drawn step: a cluster of its ops (a single node for a
// memset, copy or builtin kernel).
func (w *writer) step(i int) {
	s := &w.m.steps[i]
	col := colours[s.cat]
	copies := w.f.copies(i)
	head := "<B>" + esc(s.label) + "</B>"
	if len(copies) > 1 {
		head += fmt.Sprintf(" <B>×%d</B>", len(copies))
	}
	stats := fmt.Sprintf("%s · %s · %.2f µs", human(float64(s.row.Bytes), "B"), human(float64(s.row.Flops), "FLOP"), s.row.GPUUs)
	if len(copies) > 1 {
		stats += " each"
	}
	switch {
	case s.row.Stepped:
		stats += fmt.Sprintf(" · %d time steps, %d GPU launches", s.row.TimeSteps, s.row.Calls)
	case s.row.TimeSteps > 0:
		stats += fmt.Sprintf(" · %d time steps inside", s.row.TimeSteps)
	}
	label := head + `<BR/><FONT POINT-SIZE="9">` + esc(stats) + `</FONT>`
	var also []string
	for _, c := range copies[1:] {
		also = append(also, w.m.steps[c].label)
	}
	tip := s.st.Ops
	if len(also) > 0 {
		tip = "also launched as:\n" + strings.Join(also, "\n")
	}
	fmt.Fprintf(w.ind(), "subgraph cluster_s%d {\n", i)
	fmt.Fprintf(w.ind(), "  label=<%s>; tooltip=%s; style=\"rounded,filled\"; fillcolor=%s; color=%s; penwidth=1.2; fontsize=10; labeljust=c;\n",
		label, quote(tip), quote(col.fill), quote(col.border))
	if s.group == nil {
		fmt.Fprintf(w.ind(), "  s%d [label=%s, fillcolor=\"white\", color=%s];\n", i, quote(s.st.Ops), quote(col.border))
	} else {
		for _, v := range s.group.Values {
			fmt.Fprintf(w.ind(), "  v%d [label=%s, tooltip=%s, color=%s];\n", v.ID, quote(opLabel(v)), quote(v.LongString()), quote(col.border))
		}
	}
	fmt.Fprintf(w.ind(), "}\n")
}

func (w *writer) ind() *bytes.Buffer {
	w.buf.WriteString("    ")
	return &w.buf
}

func opLabel(v *ir.Value) string {
	if v.Op == "matmul" && (v.Attrs.TransA || v.Attrs.TransB) {
		t := ""
		if v.Attrs.TransA {
			t += "Aᵀ"
		}
		if v.Attrs.TransB {
			t += "Bᵀ"
		}
		return "matmul " + t
	}
	return v.Op
}

// flatNodes writes the flat views (the optimizer's whole parameter and
// gradient vectors) that the phase's steps read.
func (w *writer) flatNodes(ph phase) {
	var vs []*ir.Value
	for v := range w.flats {
		if w.flatPhase(v) == ph {
			vs = append(vs, v)
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].ID < vs[j].ID })
	for _, v := range vs {
		name, fill, shape := "flat view", "white", "box"
		switch {
		case allRole(v.Args, ir.Param):
			name, fill, shape = "all parameters (one vector)", paramFill, "box3d"
		case w.allGrads(v.Args):
			name = "all gradients (one vector)"
		}
		fmt.Fprintf(w.ind(), "v%d [label=%s, shape=%s, style=\"filled,bold\", fillcolor=%s];\n", v.ID, quote(name+"\n"+v.Type()), shape, quote(fill))
	}
}

// flatPhase is the phase of the first step that reads v.
func (w *writer) flatPhase(v *ir.Value) phase {
	for _, s := range w.m.steps {
		if s.group == nil {
			continue
		}
		for _, u := range s.group.Values {
			for _, a := range u.Args {
				if viewBase(a) == v {
					return s.phase
				}
			}
		}
	}
	return optimizer
}

func allRole(vs []*ir.Value, r ir.Role) bool {
	for _, v := range vs {
		if viewBase(v).Role != r {
			return false
		}
	}
	return len(vs) > 0
}

func (w *writer) allGrads(vs []*ir.Value) bool {
	grads := map[*ir.Value]bool{}
	for _, g := range w.m.prog.Step.Grads {
		grads[viewBase(g)] = true
	}
	for _, v := range vs {
		if !grads[viewBase(v)] {
			return false
		}
	}
	return len(vs) > 0
}

// viewBase follows reshapes to the value that owns the storage.
func viewBase(v *ir.Value) *ir.Value {
	for v.Op == "reshape" {
		v = v.Args[0]
	}
	return v
}

func isSource(v *ir.Value) bool {
	return v.Role == ir.Input || v.Role == ir.Param || v.Role == ir.State
}

// writeSources writes the inputs, parameters and state the drawn steps
// read, outside the phases.
func (w *writer) writeSources() {
	var vs []*ir.Value
	for v := range w.sources {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].ID < vs[j].ID })
	for _, v := range vs {
		name := v.Name
		if also := w.sources[v]; len(also) > 0 {
			name = span(v.Name, also[len(also)-1]) + fmt.Sprintf(" (×%d)", len(also)+1)
		}
		label := name + "\n" + v.Type()
		switch v.Role {
		case ir.Param:
			fmt.Fprintf(&w.buf, "  v%d [label=%s, shape=box3d, style=\"filled,bold\", fillcolor=%s, tooltip=%s];\n", v.ID, quote("param "+label), quote(paramFill), quote(v.LongString()))
		case ir.Input:
			fmt.Fprintf(&w.buf, "  v%d [label=%s, shape=ellipse, style=\"filled\", fillcolor=\"white\", tooltip=%s];\n", v.ID, quote("input "+label), quote(v.LongString()))
		default:
			fmt.Fprintf(&w.buf, "  v%d [label=%s, shape=folder, style=\"filled\", fillcolor=%s, tooltip=%s];\n", v.ID, quote("state "+label), quote(stateFill), quote(v.LongString()))
		}
	}
}

// span names a run of sources by its first and last: the part they share
// once, the part that differs in braces (blocks.{0…11}.norm1.weight).
func span(first, last string) string {
	p := 0
	for p < len(first) && p < len(last) && first[p] == last[p] {
		p++
	}
	s := 0
	for s < len(first)-p && s < len(last)-p && first[len(first)-1-s] == last[len(last)-1-s] {
		s++
	}
	if p == 0 && s == 0 {
		return first + " … " + last
	}
	return first[:p] + "{" + first[p:len(first)-s] + "…" + last[p:len(last)-s] + "}" + first[len(first)-s:]
}

// quote is a DOT double-quoted string.
func quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", "")
	return `"` + r.Replace(s) + `"`
}

// esc escapes text for a DOT HTML-like label.
func esc(s string) string { return html.EscapeString(s) }

// human writes n with an SI prefix: 788.5 kB, 316.1 MFLOP.
func human(n float64, unit string) string {
	for _, p := range []struct {
		f float64
		s string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if n >= p.f {
			return fmt.Sprintf("%.1f %s%s", n/p.f, p.s, unit)
		}
	}
	return fmt.Sprintf("%.0f %s", n, unit)
}
