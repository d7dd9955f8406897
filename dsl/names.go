package dsl

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// checkTensorName rejects names that PyTorch's state_dict could not hold
// or that break the one-line-per-value IR and error texts: an empty
// segment (a layer named "" gave the parameter ".weight", which
// torch.nn.Module.add_module refuses) and control characters (a newline
// split a checkpoint key over two lines of every message that names it).
func checkTensorName(name string) error {
	for _, seg := range strings.Split(name, ".") {
		if seg == "" {
			return fmt.Errorf("name %q has an empty part: layer and tensor names must be non-empty, separated by single dots", name)
		}
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("name %q holds the control character %U", name, r)
		}
	}
	return nil
}

// checkInit rejects what torch.nn.init refuses: uniform_ wants from ≤ to
// and normal_ a standard deviation ≥ 0.
func checkInit(in Init) error {
	switch {
	case in.kind == "uniform" && in.a > in.b:
		return fmt.Errorf("initialiser uniform(%g, %g) needs lo ≤ hi", in.a, in.b)
	case in.kind == "normal" && in.b < 0:
		return fmt.Errorf("initialiser normal(%g, %g) needs a standard deviation ≥ 0", in.a, in.b)
	}
	return nil
}

// isNil records, at the layer's line, that it was given a nil tensor: a
// package-level op (ReLU, Concat) given nil returns nil with no model to
// report to, so the first layer that receives it must say so, or the error
// surfaces lines later as a shape mismatch at the loss.
func (m *Model) isNil(pos ir.Pos, op, name, arg string, x *Tensor) bool {
	if !zero(x) {
		return false
	}
	m.fail(pos, op, "%s: %s is nil (an op given a nil tensor returns nil)", name, arg)
	return true
}

// zero reports whether t is nil or a zero Tensor (new(dsl.Tensor), made by
// no model): every op treats both as nil. A zero Tensor used to reach a
// nil model or value and panic.
func zero(t *Tensor) bool { return t == nil || t.m == nil || t.v == nil }

// single is the one options value a layer takes, its zero value when none
// is given: the parameter is variadic only to make the options optional,
// and the values after the first used to be dropped without a word.
func single[T any](m *Model, pos ir.Pos, op string, opts []T) (T, bool) {
	var o T
	if len(opts) > 1 {
		m.fail(pos, op, "%d %T values given: pass one at most", len(opts), o)
		return o, false
	}
	if len(opts) == 1 {
		o = opts[0]
	}
	return o, true
}

// savedRole reports whether a tensor of this role is a checkpoint entry:
// parameters and state share PyTorch's one state_dict namespace, so a
// Param and a State of one name would be two tensors under one key.
func savedRole(r ir.Role) bool { return r == ir.Param || r == ir.State }
