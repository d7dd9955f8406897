package fuzzgen

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ngen-ml/ngen/dsl"
)

// row is one op of the generator: its shape rule, its DSL call, the Go
// source of that call and how to draw it. testdata/oracle/torch_fuzz.py
// has the op's PyTorch function under the same name.
type row struct {
	name string
	// infer returns the result shapes from the operands' shapes.
	infer func(n *Node, in []Shape) ([]Shape, error)
	// build makes the DSL call on the operands a.
	build func(b *builder, n *Node, a []*dsl.Tensor) []*dsl.Tensor
	// src is the Go source of the call, given the operands' Go
	// expressions; the builder's *dsl.Model is m, names are quoted.
	src func(n *Node, a []string) string
	// draw appends the op to g's model on operands it picks or creates,
	// and reports whether it could.
	draw func(g *gen) bool
	// weight is how often draw is tried (0: never drawn; the op is made by
	// other draws, as inputs are).
	weight int
	// streams is how many dropout streams the call draws (nil: none).
	streams func(n *Node) int
	// noOracle, when set, says why the PyTorch oracle cannot check the
	// node (the spec is then checked by the other comparisons only).
	noOracle func(n *Node) string
	// inexact says the fused and unfused builds compute node n of s with
	// different arithmetic, so they agree to a tolerance, not bit for bit.
	inexact func(s *Spec, n *Node) bool
}

var table = map[string]*row{}

func register(rows ...*row) {
	for _, r := range rows {
		if _, dup := table[r.name]; dup {
			panic("fuzzgen: duplicate op " + r.name)
		}
		table[r.name] = r
	}
}

// OpNames lists the ops the generator knows, sorted.
func OpNames() []string {
	var out []string
	for n := range table {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// builder makes the DSL calls of one or more specs in one dsl.Model.
type builder struct {
	m      *dsl.Model
	dt     dsl.DType
	prefix string // of every input and layer name of the spec being built
	stream int    // dropout streams drawn so far in the model
}

func (b *builder) name(n *Node) string { return b.prefix + n.Name }

// dims turns a Shape into the DSL's dimension arguments.
func dims(s Shape) []any {
	out := make([]any, len(s))
	for i, d := range s {
		if d == Batch {
			out[i] = dsl.Batch
		} else {
			out[i] = d
		}
	}
	return out
}

// dimsSrc is the Go source of dims(s).
func dimsSrc(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		if d == Batch {
			parts[i] = "dsl.Batch"
		} else {
			parts[i] = fmt.Sprint(d)
		}
	}
	return strings.Join(parts, ", ")
}

func intsSrc(v []int) string {
	parts := make([]string, len(v))
	for i, d := range v {
		parts[i] = fmt.Sprint(d)
	}
	return strings.Join(parts, ", ")
}

// goFloat prints f as a Go float literal that reads back exactly.
func goFloat(f float64) string {
	s := fmt.Sprintf("%v", f)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

func goBool(v bool) string { return fmt.Sprint(v) }

func one(t *dsl.Tensor) []*dsl.Tensor { return []*dsl.Tensor{t} }

// bit is flag i of n.Ints read as a boolean.
func bit(n *Node, i int) bool { return i < len(n.Ints) && n.Ints[i] != 0 }

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

// normAxis is axis counted from the front of a rank-n shape, or an error.
func normAxis(axis, n int) (int, error) {
	a := axis
	if a < 0 {
		a += n
	}
	if a < 0 || a >= n {
		return 0, fmt.Errorf("axis %d out of range for rank %d", axis, n)
	}
	return a, nil
}

func wantArgs(in []Shape, lo, hi int) error {
	if len(in) < lo || len(in) > hi {
		return fmt.Errorf("%d operands, want %d..%d", len(in), lo, hi)
	}
	return nil
}

// always is an inexact rule: the op's fused form (LayerNorm, softmax,
// attention, batch norm's shared statistics pass) sums in another order
// than the primitive ops -fuse=none expands it to.
func always(*Spec, *Node) bool { return true }

// projected is the inexact rule of the ops that lower to a matmul, which
// may read an embedding: with fusion on, the compiler's "project
// embedding" pass multiplies the table instead of the embedded tokens
// (compiler/embed_project.go), exact in real arithmetic but summed in
// another order (fuzz_132_min). Other operands fall to sharedGEMM.
func projected(s *Spec, n *Node) bool {
	if op := s.Nodes[n.Args[0].N].Op; op == "embedding" || op == "embed" {
		return true
	}
	return sharedGEMM(s, n)
}

// sharedGEMM is the inexact rule of ops that lower to a GEMM batched
// over one operand's leading dimensions with the other operand shared
// (Linear or MatMul of a rank ≥ 3 input, a convolution's im2col GEMM,
// the recurrences' input projection): the shared operand's gradient is
// a sum over the batch, which the fused build accumulates inside the
// GEMM (compiler/fuse.go) and the unfused one sums in a reduction.
func sharedGEMM(s *Spec, n *Node) bool {
	switch n.Op {
	case "linear":
		return len(s.shapeOf(n.Args[0])) >= 3
	case "matmul", "batch_matmul":
		a, b := s.shapeOf(n.Args[0]), s.shapeOf(n.Args[1])
		return !Shape(a[:len(a)-2]).Eq(b[:len(b)-2])
	}
	return true
}
