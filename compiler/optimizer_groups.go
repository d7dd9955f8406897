package compiler

import (
	"fmt"
	"path"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/runtime"
)

// paramGroups assigns every parameter to an optimizer group: the first
// declared group one of whose patterns matches it (a path.Match glob on
// its name, or on the kind its layer recorded, Value.Attrs.Str), else the
// default group. It returns the members of each declared group, then of
// the default group, each in declaration order; this order is also the
// parameters' layout in the flat vectors (memplan.go), so each group is
// one contiguous slice. Within a group the parameters no gradient
// reaches (unreached, Func.Unreached) come last, so that the ones the
// update reads and writes are one contiguous slice too. A pattern that
// matches no parameter, or a group left with none, is an error at the
// user's Optimizer call.
func paramGroups(m *ir.Model, params []*ir.Value, unreached map[string]bool) ([][]*ir.Value, error) {
	out, err := declaredGroups(m, params)
	if err != nil {
		return nil, err
	}
	for i, g := range out {
		out[i] = reachedFirst(g, unreached)
	}
	return out, nil
}

// reachedFirst returns g with the parameters unreached names moved to the
// end, each part in its order.
func reachedFirst(g []*ir.Value, unreached map[string]bool) []*ir.Value {
	if len(unreached) == 0 {
		return g
	}
	out := make([]*ir.Value, 0, len(g))
	for _, v := range g {
		if !unreached[v.Name] {
			out = append(out, v)
		}
	}
	for _, v := range g {
		if unreached[v.Name] {
			out = append(out, v)
		}
	}
	return out
}

// declaredGroups is paramGroups before the reached parameters are put
// first.
func declaredGroups(m *ir.Model, params []*ir.Value) ([][]*ir.Value, error) {
	o := m.Optimizer
	out := make([][]*ir.Value, len(o.Groups)+1)
	if len(o.Groups) == 0 {
		out[0] = params
		return out, nil
	}
	fail := func(i int, format string, args ...any) error {
		return fmt.Errorf("%s (%s): parameter group %d: %s", o.Kind, o.Pos, i, fmt.Sprintf(format, args...))
	}
	matches := func(pat, s string) bool {
		ok, _ := path.Match(pat, s) // patterns were checked by the DSL; a bad one matches nothing
		return ok
	}
	for i, g := range o.Groups {
		if len(g.Names)+len(g.Kinds) == 0 {
			return nil, fail(i, "no Names or Kinds: it would match nothing")
		}
		for _, pats := range []struct {
			what string
			pats []string
			of   func(*ir.Value) string
		}{{"name", g.Names, func(v *ir.Value) string { return v.Name }}, {"kind", g.Kinds, func(v *ir.Value) string { return v.Attrs.Str }}} {
			for _, pat := range pats.pats {
				if _, err := path.Match(pat, ""); err != nil {
					return nil, fail(i, "%s pattern %q: %v", pats.what, pat, err)
				}
				found := false
				for _, v := range params {
					found = found || matches(pat, pats.of(v))
				}
				if !found {
					return nil, fail(i, "%s pattern %q matches no parameter (%s)", pats.what, pat, examples(params, pats.of))
				}
			}
		}
	}
	for _, v := range params {
		at := len(o.Groups)
		for i, g := range o.Groups {
			for _, pat := range g.Names {
				if matches(pat, v.Name) && i < at {
					at = i
				}
			}
			for _, pat := range g.Kinds {
				if matches(pat, v.Attrs.Str) && i < at {
					at = i
				}
			}
		}
		out[at] = append(out[at], v)
	}
	for i := range o.Groups {
		if len(out[i]) == 0 {
			return nil, fail(i, "every parameter it matches is taken by an earlier group")
		}
	}
	return out, nil
}

// examples lists a few of the parameters' names or kinds for a message.
func examples(params []*ir.Value, of func(*ir.Value) string) string {
	var xs []string
	seen := map[string]bool{}
	for _, v := range params {
		x := of(v)
		if x == "" || seen[x] {
			continue
		}
		seen[x] = true
		if len(xs) == 6 {
			xs = append(xs, "...")
			break
		}
		xs = append(xs, x)
	}
	return "the model has " + strings.Join(xs, ", ")
}

// planOptimizer is the plan's form of the optimizer; groups lists the
// members of each group as paramGroups returns them, and fills in the
// declared groups' members and slices of the flat vectors.
func planOptimizer(o *ir.Optimizer, groups [][]*ir.Value) runtime.Optimizer {
	ro := runtime.Optimizer{Kind: o.Kind, LR: o.LR, Momentum: o.Momentum, Dampening: o.Dampening, Nesterov: o.Nesterov,
		WeightDecay: o.WeightDecay, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, Schedule: o.Schedule,
		ClipValue: o.ClipValue, ClipNorm: o.ClipNorm, ClipNormOff: o.ClipNormOff}
	var off int64
	for i, g := range o.Groups {
		pg := runtime.ParamGroup{LRScale: g.LRScale, WeightDecay: g.WeightDecay, OwnDecay: g.OwnDecay,
			Beta1: g.Beta1, Beta2: g.Beta2, Momentum: g.Momentum, Offset: off}
		if i < len(groups) {
			for _, v := range groups[i] {
				pg.Params = append(pg.Params, v.Name)
				pg.Elems += v.Shape.Size().N
			}
		}
		off += pg.Elems
		ro.Groups = append(ro.Groups, pg)
	}
	return ro
}
