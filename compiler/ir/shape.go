package ir

import (
	"fmt"
	"sort"
	"strings"
)

// Dim is one dimension: a constant N, or a symbol (the batch size "B")
// bound at run time.
type Dim struct {
	N   int    `json:"n,omitempty"`
	Sym string `json:"sym,omitempty"`
}

// Shape is a list of dimensions, outermost first. A scalar has none.
type Shape []Dim

// D is a constant dimension.
func D(n int) Dim { return Dim{N: n} }

// S is a symbolic dimension.
func S(sym string) Dim { return Dim{Sym: sym} }

// Static builds a shape from constants.
func Static(ns ...int) Shape {
	s := make(Shape, len(ns))
	for i, n := range ns {
		s[i] = D(n)
	}
	return s
}

func (d Dim) String() string {
	if d.Sym != "" {
		return d.Sym
	}
	return fmt.Sprint(d.N)
}

// Eq reports whether two dims are the same.
func (d Dim) Eq(e Dim) bool { return d == e }

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = d.String()
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Eq reports whether two shapes are identical.
func (s Shape) Eq(t Shape) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

// Clone copies s.
func (s Shape) Clone() Shape { return append(Shape(nil), s...) }

// Size is the element count as a product of a constant and symbols.
type Size struct {
	N    int64
	Syms []string // sorted, with repetition
}

// Size returns the element count of s.
func (s Shape) Size() Size {
	z := Size{N: 1}
	for _, d := range s {
		if d.Sym != "" {
			z.Syms = append(z.Syms, d.Sym)
		} else {
			z.N *= int64(d.N)
		}
	}
	sort.Strings(z.Syms)
	return z
}

// Eval evaluates the size with symbol bindings.
func (z Size) Eval(env map[string]int) int64 {
	n := z.N
	for _, s := range z.Syms {
		n *= int64(env[s])
	}
	return n
}

// C is the size as a C expression over symbol parameters.
func (z Size) C() string {
	parts := []string{fmt.Sprint(z.N)}
	for _, s := range z.Syms {
		parts = append(parts, "(long long)"+s)
	}
	if len(parts) > 1 && z.N == 1 {
		parts = parts[1:]
	}
	return strings.Join(parts, " * ")
}

func (z Size) String() string {
	parts := []string{fmt.Sprint(z.N)}
	parts = append(parts, z.Syms...)
	if len(parts) > 1 && z.N == 1 {
		parts = parts[1:]
	}
	return strings.Join(parts, "*")
}

// Syms lists the distinct symbols of s in order of appearance.
func (s Shape) Syms() []string {
	var out []string
	seen := map[string]bool{}
	for _, d := range s {
		if d.Sym != "" && !seen[d.Sym] {
			seen[d.Sym] = true
			out = append(out, d.Sym)
		}
	}
	return out
}

// Broadcast returns the NumPy broadcast of a and b, or an error.
func Broadcast(a, b Shape) (Shape, error) {
	n := len(a)
	if len(b) > n {
		n = len(b)
	}
	out := make(Shape, n)
	for i := 0; i < n; i++ {
		da, db := D(1), D(1)
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db:
			out[i] = da
		case da == D(1):
			out[i] = db
		case db == D(1):
			out[i] = da
		default:
			return nil, fmt.Errorf("shapes %s and %s do not broadcast (dim %d: %s vs %s)", a, b, i, da, db)
		}
	}
	return out, nil
}

// NormAxes resolves negative axes against rank and checks bounds; nil means
// all axes.
func NormAxes(axes []int, rank int) ([]int, error) {
	if axes == nil {
		out := make([]int, rank)
		for i := range out {
			out[i] = i
		}
		return out, nil
	}
	seen := map[int]bool{}
	var out []int
	for _, given := range axes {
		// Messages name the axis as given: -3 of a rank-2 tensor was
		// reported as "axis -1".
		a := given
		if a < 0 {
			a += rank
		}
		if a < 0 || a >= rank {
			return nil, fmt.Errorf("axis %d out of range for rank %d", given, rank)
		}
		if seen[a] && given != a {
			return nil, fmt.Errorf("axis %d (axis %d of rank %d) repeated", given, a, rank)
		}
		if seen[a] {
			return nil, fmt.Errorf("axis %d repeated", a)
		}
		seen[a] = true
		out = append(out, a)
	}
	sort.Ints(out)
	return out, nil
}

func sortStrings(s []string) { sort.Strings(s) }
