// Package fuzzgen draws random, valid models from the DSL's ops and checks
// them differentially: the fused build against the unfused one, the
// kernels' GPU forms against the CPU forms, forward, gradients and three
// optimizer steps against PyTorch, and the planned peak memory against
// what a session allocates. A failure is shrunk to a small model whose DSL
// source (Spec.Source) is pasted into a regression test.
//
// A Spec is the model as data: a list of nodes, each one DSL call with its
// operands and attributes. The same Spec builds the dsl.Model
// (Spec.Build), prints as the Go code that builds it (Spec.Source), and
// travels as JSON to testdata/oracle/torch_fuzz.py, which computes it with
// torch. Each op's shape rule, its DSL call, its Go source and its drawing
// live in one row of the op table (ops_*.go); the PyTorch side has one
// function per op in torch_fuzz.py.
//
// Pipeline: this package draws DSL models (→ IR → passes → kernels → glue
// → runtime) and runs them with codegen/jit on the CPU backend.
package fuzzgen

import (
	"fmt"
	"strings"
)

// Shape is a tensor shape; Batch (-1) stands for dsl.Batch, bound to
// Spec.Batch when the model runs.
type Shape []int

// Batch marks the symbolic batch dimension in a Shape.
const Batch = -1

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		if d == Batch {
			parts[i] = "B"
		} else {
			parts[i] = fmt.Sprint(d)
		}
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// Eq reports whether s and t are the same shape.
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

// Concrete is s with the batch dimension bound to batch.
func (s Shape) Concrete(batch int) []int {
	out := make([]int, len(s))
	for i, d := range s {
		out[i] = d
		if d == Batch {
			out[i] = batch
		}
	}
	return out
}

// Elems is the element count of s at batch.
func (s Shape) Elems(batch int) int {
	n := 1
	for _, d := range s.Concrete(batch) {
		n *= d
	}
	return n
}

// HasBatch reports whether s has the batch dimension.
func (s Shape) HasBatch() bool {
	for _, d := range s {
		if d == Batch {
			return true
		}
	}
	return false
}

// Static reports whether every dimension of s is static.
func (s Shape) Static() bool { return !s.HasBatch() }

// Ref names one result of a node.
type Ref struct {
	N int `json:"n"`           // the node
	O int `json:"o,omitempty"` // which of its results
}

// Node is one DSL call. The meaning of Ints, F and Str is the op's (its
// row in the op table says); Out is filled by the op's shape rule.
type Node struct {
	Op   string  `json:"op"`
	Args []Ref   `json:"args,omitempty"`
	Name string  `json:"name,omitempty"` // an input's or a layer's name
	Ints []int   `json:"ints,omitempty"`
	K    int     `json:"k,omitempty"` // a count: classes, vocabulary, width
	F    float64 `json:"f,omitempty"`
	Str  string  `json:"str,omitempty"`
	// Ckpt > 0 puts the node in checkpointed segment Ckpt (m.Checkpoint):
	// consecutive nodes with one Ckpt form one segment.
	Ckpt int `json:"ckpt,omitempty"`
	// Out are the result shapes, one per result.
	Out []Shape `json:"out"`
}

// Opt is the model's optimizer: Kind "sgd", "adam" or "adamw" with the DSL
// struct's fields (zero Beta1, Beta2, Eps take PyTorch's defaults, as in
// the DSL).
type Opt struct {
	Kind                                 string  `json:"kind"`
	LR, Momentum, Dampening, WeightDecay float64 `json:",omitempty"`
	Nesterov                             bool    `json:",omitempty"`
	Beta1, Beta2, Eps                    float64 `json:",omitempty"`
	NoWeightDecay                        bool    `json:",omitempty"`
}

// Spec is one random model: its nodes in declaration order, the node
// whose result is the prediction output and the scalar node that is the
// loss.
type Spec struct {
	Name string `json:"name"`
	// Seed is the generator seed that drew it (0 for a hand-written or
	// shrunk spec); Data seeds its input data.
	Seed  uint64 `json:"seed"`
	Data  uint64 `json:"data"`
	DType string `json:"dtype"` // "f32" or "f64"
	// Batch is the size the batch dimension takes when the model runs.
	Batch  int    `json:"batch"`
	Nodes  []Node `json:"nodes"`
	Output Ref    `json:"output"`
	Loss   Ref    `json:"loss"`
	Opt    Opt    `json:"opt"`
}

// shapeOf is the shape of result r.
func (s *Spec) shapeOf(r Ref) Shape { return s.Nodes[r.N].Out[r.O] }

// Clone is a deep copy of s.
func (s *Spec) Clone() *Spec {
	c := *s
	c.Nodes = make([]Node, len(s.Nodes))
	for i, n := range s.Nodes {
		n.Args = append([]Ref(nil), n.Args...)
		n.Ints = append([]int(nil), n.Ints...)
		out := make([]Shape, len(n.Out))
		for j, o := range n.Out {
			out[j] = o.Clone()
		}
		n.Out = out
		c.Nodes[i] = n
	}
	return &c
}

// Infer runs every node's shape rule in order, filling Out, and checks
// the output and the loss: what the shrinker calls after changing a size.
func (s *Spec) Infer() error {
	for i := range s.Nodes {
		n := &s.Nodes[i]
		row := table[n.Op]
		if row == nil {
			return fmt.Errorf("node %d: unknown op %q", i, n.Op)
		}
		in := make([]Shape, len(n.Args))
		for j, a := range n.Args {
			if a.N < 0 || a.N >= i || a.O < 0 || a.O >= len(s.Nodes[a.N].Out) {
				return fmt.Errorf("node %d (%s): operand %d refers to %v", i, n.Op, j, a)
			}
			in[j] = s.shapeOf(a)
		}
		out, err := row.infer(n, in)
		if err != nil {
			return fmt.Errorf("node %d (%s): %v", i, n.Op, err)
		}
		n.Out = out
	}
	for _, r := range []Ref{s.Output, s.Loss} {
		if r.N < 0 || r.N >= len(s.Nodes) || r.O >= len(s.Nodes[r.N].Out) {
			return fmt.Errorf("output or loss refers to %v", r)
		}
	}
	if l := s.shapeOf(s.Loss); len(l) != 0 {
		return fmt.Errorf("the loss has shape %s, want a scalar", l)
	}
	return nil
}

// Ops lists the ops of s's nodes, in order.
func (s *Spec) Ops() []string {
	out := make([]string, len(s.Nodes))
	for i, n := range s.Nodes {
		out[i] = n.Op
	}
	return out
}

// Has reports whether s has a node with op.
func (s *Spec) Has(op string) bool {
	for _, n := range s.Nodes {
		if n.Op == op {
			return true
		}
	}
	return false
}

// Prune removes the nodes neither the loss nor the output depends on,
// renumbering the references.
func (s *Spec) Prune() {
	live := make([]bool, len(s.Nodes))
	live[s.Loss.N], live[s.Output.N] = true, true
	for i := len(s.Nodes) - 1; i >= 0; i-- {
		if live[i] {
			for _, a := range s.Nodes[i].Args {
				live[a.N] = true
			}
		}
	}
	index := make([]int, len(s.Nodes))
	var nodes []Node
	for i, n := range s.Nodes {
		index[i] = len(nodes)
		if live[i] {
			for j, a := range n.Args {
				n.Args[j].N = index[a.N]
			}
			nodes = append(nodes, n)
		}
	}
	s.Nodes = nodes
	s.Loss.N, s.Output.N = index[s.Loss.N], index[s.Output.N]
}
