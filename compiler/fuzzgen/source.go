package fuzzgen

import (
	"fmt"
	"strings"
)

// Source prints the Go function, named fn, that declares s with the DSL:
// what a regression test pastes. It builds the same model as s.Build
// (TestSourceBuildsTheSameModel compiles and compares them).
func (s *Spec) Source(fn string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "// %s declares fuzzgen model %s (generator seed %d, data seed %d, batch %d).\n", fn, s.Name, s.Seed, s.Data, s.Batch)
	fmt.Fprintf(&b, "func %s() *dsl.Model {\n", fn)
	dt := "dsl.F32"
	if s.DType == "f64" {
		dt = "dsl.F64"
	}
	fmt.Fprintf(&b, "\tconst DT = %s\n", dt)
	fmt.Fprintf(&b, "\tm := dsl.NewModel(%q)\n", s.Name)
	used := map[Ref]bool{s.Loss: true, s.Output: true}
	for i, n := range s.Nodes {
		for _, a := range n.Args {
			used[a] = true
		}
		// A checkpointed segment returns its last node's result.
		if n.Ckpt > 0 && (i+1 == len(s.Nodes) || s.Nodes[i+1].Ckpt != n.Ckpt) {
			used[Ref{i, 0}] = true
		}
	}
	name := func(r Ref) string {
		if r.O == 0 {
			return fmt.Sprintf("v%d", r.N)
		}
		return fmt.Sprintf("v%d_%d", r.N, r.O)
	}
	// lhs is the left side of node i's assignment, unused results as _.
	lhs := func(i int) string {
		parts := make([]string, len(s.Nodes[i].Out))
		for o := range parts {
			parts[o] = "_"
			if used[Ref{i, o}] {
				parts[o] = name(Ref{i, o})
			}
		}
		return strings.Join(parts, ", ")
	}
	call := func(i int) string {
		n := &s.Nodes[i]
		args := make([]string, len(n.Args))
		for j, a := range n.Args {
			args[j] = name(a)
		}
		return table[n.Op].src(n, args)
	}
	for i := 0; i < len(s.Nodes); {
		ck := s.Nodes[i].Ckpt
		if ck == 0 {
			l := lhs(i)
			if strings.Trim(l, "_, ") == "" {
				l = "_"
			}
			op := ":="
			if l == "_" {
				op = "="
			}
			fmt.Fprintf(&b, "\t%s %s %s\n", l, op, call(i))
			i++
			continue
		}
		j := i
		for j < len(s.Nodes) && s.Nodes[j].Ckpt == ck {
			j++
		}
		var decl []string
		for t := i; t < j; t++ {
			for o := range s.Nodes[t].Out {
				if used[Ref{t, o}] {
					decl = append(decl, name(Ref{t, o}))
				}
			}
		}
		if len(decl) > 0 {
			fmt.Fprintf(&b, "\tvar %s *dsl.Tensor\n", strings.Join(decl, ", "))
		}
		b.WriteString("\tm.Checkpoint(func() *dsl.Tensor {\n")
		for t := i; t < j; t++ {
			l := lhs(t)
			if strings.Trim(l, "_, ") == "" {
				l = "_"
			}
			fmt.Fprintf(&b, "\t\t%s = %s\n", l, call(t))
		}
		fmt.Fprintf(&b, "\t\treturn %s\n\t})\n", name(Ref{j - 1, 0}))
		i = j
	}
	fmt.Fprintf(&b, "\tm.Output(%s)\n", name(s.Output))
	fmt.Fprintf(&b, "\tm.Loss(%s)\n", name(s.Loss))
	fmt.Fprintf(&b, "\tm.Optimizer(%s)\n", s.Opt.Source())
	b.WriteString("\treturn m\n}\n")
	return b.String()
}
