package graph

import (
	"fmt"
	"sort"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/runtime"
)

// The edges of the picture: what each drawn step reads, mapped through
// the folds onto the drawn copies.

// node is the drawn node of value v computed or read by the steps: its
// folded representative's.
func (w *writer) node(v *ir.Value) (string, bool) {
	v = viewBase(v)
	if isSource(v) {
		if _, ok := w.sources[v]; !ok {
			w.sources[v] = nil
		}
		return fmt.Sprintf("v%d", v.ID), true
	}
	if v.Op == "flat" {
		w.flats[v] = true
		return fmt.Sprintf("v%d", v.ID), true
	}
	j, ok := w.m.owner[v]
	if !ok {
		return "", false
	}
	r := w.f.rep[j]
	if r == j {
		return fmt.Sprintf("v%d", v.ID), true
	}
	src, dst := w.m.steps[j].group, w.m.steps[r].group
	for k, u := range src.Values {
		if u == v && k < len(dst.Values) {
			return fmt.Sprintf("v%d", dst.Values[k].ID), true
		}
	}
	return "", false
}

func (w *writer) edge(from, to, attrs string) {
	if from == to || w.edges[[2]string{from, to}] {
		return
	}
	w.edges[[2]string{from, to}] = true
	w.elist = append(w.elist, fmt.Sprintf("  %s -> %s [%s];\n", from, to, attrs))
}

// edgesOfSteps draws every drawn step's reads, the flat views' parts,
// the updates and the builtin steps' links.
func (w *writer) edgesOfSteps() {
	m := w.m
	byBuf := map[int]*ir.Value{}
	for v, b := range m.prog.BufOf {
		if u, ok := byBuf[b]; !ok || v.ID < u.ID {
			byBuf[b] = v
		}
	}
	firstOpt := ""
	for i, s := range m.steps {
		if w.f.rep[i] != i {
			w.aliasSources(i)
			continue
		}
		if s.group == nil {
			w.builtinEdges(i, byBuf)
			continue
		}
		if s.phase == optimizer && firstOpt == "" {
			firstOpt = fmt.Sprintf("v%d", s.group.Values[0].ID)
		}
		members := map[*ir.Value]bool{}
		for _, v := range s.group.Values {
			members[v] = true
		}
		for _, v := range s.group.Values {
			to := fmt.Sprintf("v%d", v.ID)
			for _, a := range v.Args {
				if a.Op == "fill" || a.Role == ir.Scalar {
					continue
				}
				b := viewBase(a)
				if members[b] {
					w.edge(fmt.Sprintf("v%d", b.ID), to, `color="#adb5bd", arrowsize=0.4`)
					continue
				}
				from, ok := w.node(a)
				if !ok {
					continue
				}
				switch {
				case b.Role == ir.Param:
					w.edge(from, to, `color="#e67700"`)
				case isSource(b):
					w.edge(from, to, "")
				default:
					w.edge(from, to, "label="+quote(a.Type()))
				}
			}
		}
	}
	// The flat views' parts, and the updates' write-backs.
	var flats []*ir.Value
	for v := range w.flats {
		flats = append(flats, v)
	}
	sort.Slice(flats, func(i, j int) bool { return flats[i].ID < flats[j].ID })
	for _, v := range flats {
		for _, a := range v.Args {
			if isSource(viewBase(a)) {
				continue
			}
			if from, ok := w.node(a); ok {
				w.edge(from, fmt.Sprintf("v%d", v.ID), "label="+quote(a.Type()))
			}
		}
	}
	for _, u := range m.prog.Step.Updates {
		j, owned := m.owner[viewBase(u.New)]
		if !owned || w.f.rep[j] != j {
			continue
		}
		from, ok1 := w.node(u.New)
		to, ok2 := w.node(u.State)
		if ok1 && ok2 {
			w.edge(from, to, `style=dashed, constraint=false, color="#2b8a3e", fontcolor="#2b8a3e", label="update"`)
		}
	}
	for i, s := range m.steps {
		if gates(s.st) && firstOpt != "" && w.f.rep[i] == i {
			w.edge(fmt.Sprintf("s%d", i), firstOpt, `style=dashed, label="gates"`)
		}
	}
}

// builtinEdges links a memset to what it zeroes, a copy to its source and
// destination, and the commit kernel to the state it writes.
func (w *writer) builtinEdges(i int, byBuf map[int]*ir.Value) {
	st := w.m.steps[i].st
	self := fmt.Sprintf("s%d", i)
	val := func(buf int) (string, bool) {
		v := byBuf[buf]
		if v == nil {
			return "", false
		}
		return w.node(v)
	}
	switch {
	case st.Kind == runtime.MemsetStep:
		if to, ok := val(st.Buf); ok {
			w.edge(self, to, `style=dotted, label="zeroes"`)
		}
	case st.Kind == runtime.CopyStep:
		if from, ok := val(st.Src); ok {
			w.edge(from, self, "")
		}
		if to, ok := val(st.Buf); ok {
			w.edge(self, to, `style=dashed, constraint=false`)
		}
	case st.Builtin == runtime.CommitKernel:
		for _, c := range st.Commits {
			if from, ok := val(c.Src); ok {
				w.edge(from, self, "")
			}
			if to, ok := val(c.Dst); ok {
				w.edge(self, to, `style=dashed, constraint=false, color="#2b8a3e", fontcolor="#2b8a3e", label="update"`)
			}
		}
	}
}

// aliasSources records, for a step drawn by its folded representative,
// the sources it reads in the representative's places (fc3.weight where
// the drawn copy reads fc2.weight), for the source nodes' labels.
func (w *writer) aliasSources(i int) {
	g, r := w.m.steps[i].group, w.m.steps[w.f.rep[i]].group
	if g == nil || r == nil || len(g.Values) != len(r.Values) {
		return
	}
	for k, v := range g.Values {
		rv := r.Values[k]
		for a := range v.Args {
			if a >= len(rv.Args) {
				break
			}
			x, y := viewBase(v.Args[a]), viewBase(rv.Args[a])
			if x != y && isSource(x) && isSource(y) && !contains(w.sources[y], x.Name) {
				w.sources[y] = append(w.sources[y], x.Name)
			}
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
