package compiler

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// GroupKind is the kernel template a group lowers to.
type GroupKind int

const (
	EW     GroupKind = iota // fused elementwise ops over one iteration space
	Reduce                  // a reduction with a fused elementwise prologue
	Gemm                    // one matmul on the device's BLAS
	CE                      // cross-entropy (and/or its gradient) with a fused prologue on the logits
	Loop                    // a recurrence over time (ops.Loop), one kernel
)

var groupKindNames = [...]string{"ew", "reduce", "gemm", "ce", "loop"}

func (k GroupKind) String() string { return groupKindNames[k] }

// Group is one kernel (or GEMM call): the values it computes, in order.
type Group struct {
	Kind   GroupKind
	Values []*ir.Value
	// SumBatch marks a Gemm group that also holds the sum of its product
	// over the batch dims: the GEMM accumulates into the sum's storage.
	SumBatch *ir.Value
	// Space is the iteration shape: the output of an elementwise group, the
	// input of a reduction, the logits of cross-entropy.
	Space ir.Shape
	// Root is the reduction, matmul or cross_entropy/ce_grad value.
	Root *ir.Value
	// Loss and Grad are the cross_entropy and ce_grad members of a CE group.
	Loss, Grad *ir.Value
	// Name labels the group's launch: its layer, ops and phase
	// (blocks_1_norm1_layernorm_fwd), unique in its function. Kernel names
	// what it computes without the layer (layernorm_fwd): launches of
	// several layers whose kernels are the same share one, so its name
	// cannot be any one layer's.
	Name   string
	Kernel string
	// Inputs are values the group reads from global memory (storage
	// owners or views), Outputs the members it writes to global memory.
	Inputs  []*ir.Value
	Outputs []*ir.Value
	// Step is the group's index in its function's plan steps.
	Step   int
	closed bool
}

func (g *Group) String() string {
	var ids []string
	for _, v := range g.Values {
		ids = append(ids, v.String())
	}
	var outs []string
	for _, v := range g.Outputs {
		outs = append(outs, v.String())
	}
	return fmt.Sprintf("%s %s %s: %s -> %s", g.Name, g.Kind, g.Space, strings.Join(ids, " "), strings.Join(outs, " "))
}

// Ops lists the op names of the group's values, for reports and comments.
func (g *Group) Ops() string {
	var parts []string
	for _, v := range g.Values {
		parts = append(parts, v.Op)
	}
	return strings.Join(parts, "+")
}

// has reports whether v is a member.
func (g *Group) has(v *ir.Value) bool {
	for _, m := range g.Values {
		if m == v {
			return true
		}
	}
	return false
}

// handedOut lists the values f gives its caller: its outputs, its
// gradients and its state updates' new values.
func handedOut(f *ir.Func) []*ir.Value {
	var vs []*ir.Value
	for _, v := range f.Outputs {
		vs = append(vs, v)
	}
	for _, v := range f.Grads {
		vs = append(vs, v)
	}
	for _, u := range f.Updates {
		vs = append(vs, u.New)
	}
	return vs
}

// replaceValue makes every reader of old among users, and every place f
// hands old out (an output, a gradient, an update), read new instead: a
// rewriting pass's step before it drops old (dropValues).
func replaceValue(f *ir.Func, users []*ir.Value, old, new *ir.Value) {
	for _, r := range users {
		for i, a := range r.Args {
			if a == old {
				r.Args[i] = new
			}
		}
	}
	for name, v := range f.Outputs {
		if v == old {
			f.Outputs[name] = new
		}
	}
	for name, v := range f.Grads {
		if v == old {
			f.Grads[name] = new
		}
	}
	for i := range f.Updates {
		if f.Updates[i].New == old {
			f.Updates[i].New = new
		}
	}
}

// handedOutSet is handedOut as a set: the values a rewriting pass must
// leave in place.
func handedOutSet(f *ir.Func) map[*ir.Value]bool {
	set := map[*ir.Value]bool{}
	for _, v := range handedOut(f) {
		set[v] = true
	}
	return set
}

// finishGroups computes each group's inputs and outputs and names it.
func finishGroups(f *ir.Func, gs []*Group) {
	owner := map[*ir.Value]*Group{}
	for _, g := range gs {
		for _, v := range g.Values {
			owner[v] = g
		}
	}
	escapes := map[*ir.Value]bool{}
	for _, v := range handedOut(f) {
		escapes[base(v)] = true
	}
	for _, v := range f.Values {
		for _, a := range v.Args {
			for _, s := range storageOf(a) {
				if owner[s] != nil && owner[s] != owner[v] {
					escapes[s] = true
				}
			}
		}
	}
	used := map[string]int{}
	for _, g := range gs {
		g.Inputs, g.Outputs = nil, nil
		seen := map[*ir.Value]bool{}
		for _, v := range g.Values {
			if escapes[v] {
				g.Outputs = append(g.Outputs, v)
			}
			for _, a := range v.Args {
				if g.has(a) || isConst(a) || a.Role == ir.Scalar || seen[a] {
					continue
				}
				seen[a] = true
				g.Inputs = append(g.Inputs, a)
			}
		}
		layer, what := groupName(g)
		g.Kernel = Sanitize(what)
		name := what
		if layer != "" {
			name = layer + "_" + what
		}
		name = Sanitize(name)
		used[name]++
		if n := used[name]; n > 1 {
			name = fmt.Sprintf("%s_%d", name, n)
		}
		g.Name = name
	}
}

// storageOf returns the values owning the storage v reads: itself, the
// base of a reshape, or every part of a flat view.
func storageOf(v *ir.Value) []*ir.Value {
	v = base(v)
	if v.Op == "flat" {
		var out []*ir.Value
		for _, a := range v.Args {
			out = append(out, storageOf(a)...)
		}
		return out
	}
	return []*ir.Value{v}
}

// groupName says what a kernel fuses: the layer it belongs to (fc1) and
// its ops and phase (bias_relu_dropout_fwd).
func groupName(g *Group) (layer, what string) {
	phase := "fwd"
	var opsList []string
	seen := map[string]bool{}
	for _, v := range g.Values {
		if v.Phase == "opt" {
			phase = "opt"
		} else if v.Phase == "bwd" && phase != "opt" {
			phase = "bwd"
		} else if v.Phase == "re" && phase == "fwd" {
			phase = "re" // a checkpointed activation recomputed in backward
		}
		op := v.Op
		for _, a := range v.Args {
			a = base(a) // a conv bias is a reshaped parameter
			if a.Role == ir.Param && layer == "" {
				layer = a.Name
				if i := strings.LastIndex(layer, "."); i > 0 {
					layer = layer[:i]
				}
			}
			if a.Role == ir.Param && op == "add" && len(a.Shape) == 1 {
				op = "bias"
			}
		}
		if !seen[op] {
			seen[op] = true
			opsList = append(opsList, op)
		}
	}
	if layer == "" && g.Kind == Loop {
		// A fused layer kernel fed by GEMMs (attention reads the QKV
		// projection) takes the layer of the parameters one step up.
		for _, v := range g.Values {
			if p := paramBehind(v, 3); p != nil && layer == "" {
				layer = p.Name[:max(strings.LastIndex(p.Name, "."), 0)]
			}
		}
	}
	if phase == "opt" {
		return "", "optimizer_update"
	}
	if len(opsList) > 5 {
		opsList = append(opsList[:5], "etc")
	}
	return layer, strings.Join(append(opsList, phase), "_")
}

// paramBehind is the first parameter among v's arguments, searched depth
// producers deep (through the GEMM and the slice of a packed weight).
func paramBehind(v *ir.Value, depth int) *ir.Value {
	for _, a := range v.Args {
		if a = base(a); a.Role == ir.Param {
			return a
		}
	}
	if depth > 1 {
		for _, a := range v.Args {
			if p := paramBehind(base(a), depth-1); p != nil {
				return p
			}
		}
	}
	return nil
}

// Sanitize maps any string to a C and Go identifier: letters, digits and
// underscores, not starting with a digit.
func Sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	out := b.String()
	if out == "" || (out[0] >= '0' && out[0] <= '9') {
		out = "k_" + out
	}
	return out
}

// kindOf is the op table's kind of v.
func kindOf(v *ir.Value) ops.Kind { return ops.Lookup(v.Op).Kind }
