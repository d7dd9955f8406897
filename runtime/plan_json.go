package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
)

// A generated package embeds its plan as data (plan.json, written by
// EncodePlan) rather than as a Go literal: a literal of a deep model's
// plan was tens of thousands of lines that the Go compiler type-checked
// on every build, and the package's Go file is then its typed API alone.

// EncodePlan writes p as compact JSON: each field under its Go name, zero
// fields left out, numbers exact (floats in their shortest round-trip
// form).
func EncodePlan(p *Plan) ([]byte, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encoding the plan of %s: %w", p.Model, err)
	}
	return append(b, '\n'), nil
}

// DecodePlan reads a plan that EncodePlan wrote and checks that its
// indices hold together: every buffer, kernel and alias a step or buffer
// names exists, and every launch passes its kernel's parameter count.
func DecodePlan(data []byte) (*Plan, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("decoding a plan: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("decoding a plan: data after the plan")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// MustDecodePlan is DecodePlan for a generated package's embedded plan,
// which ngen wrote: an error means the package's files were damaged.
func MustDecodePlan(data []byte) *Plan {
	p, err := DecodePlan(data)
	if err != nil {
		panic(fmt.Sprintf("ngen: the embedded plan is damaged (run go generate): %v", err))
	}
	return p
}

// Validate checks the plan's cross-references.
func (p *Plan) Validate() error {
	nb := len(p.Buffers)
	buf := func(where string, i int) error {
		if i < 0 || i >= nb {
			return fmt.Errorf("plan %s: %s names buffer %d of %d", p.Model, where, i, nb)
		}
		return nil
	}
	if p.Model == "" || len(p.Funcs) == 0 {
		return fmt.Errorf("plan %q: no model name or no functions: not a plan that ngen wrote", p.Model)
	}
	for i, b := range p.Buffers {
		if b.Elems.Mul < 0 || b.Offset < 0 {
			return fmt.Errorf("plan %s: buffer %d (%s) has %d elements per unit at offset %d", p.Model, i, b.Name, b.Elems.Mul, b.Offset)
		}
		for _, y := range b.Elems.Syms {
			if !slices.Contains(p.Symbols, y) {
				return fmt.Errorf("plan %s: buffer %d (%s) is sized by symbol %q, not one of %v", p.Model, i, b.Name, y, p.Symbols)
			}
		}
		if b.AliasOf != 0 && b.Placement != Alias {
			return fmt.Errorf("plan %s: buffer %d (%s) names an alias target but is not an alias", p.Model, i, b.Name)
		}
		if b.Placement == Alias {
			if err := buf(fmt.Sprintf("buffer %d (%s) aliases a buffer that", i, b.Name), b.AliasOf); err != nil {
				return err
			}
		}
	}
	for _, f := range p.Funcs {
		for _, n := range append(append([]Named(nil), f.Inputs...), f.Outputs...) {
			if err := buf(f.Name+"'s "+n.Name, n.Buf); err != nil {
				return err
			}
		}
		if f.UpdateFrom < 0 || f.UpdateFrom > len(f.Steps) {
			return fmt.Errorf("plan %s: %s updates from step %d of %d", p.Model, f.Name, f.UpdateFrom, len(f.Steps))
		}
		for si, st := range f.Steps {
			where := fmt.Sprintf("%s step %d", f.Name, si)
			switch st.When {
			case Always:
			case WhileClipping:
				if !p.Optimizer.GradNorm() {
					return fmt.Errorf("plan %s: %s runs while clipping, and the plan has no gradient clipping by norm", p.Model, where)
				}
			default:
				return fmt.Errorf("plan %s: %s has unknown condition %d", p.Model, where, int(st.When))
			}
			switch st.Kind {
			case LaunchStep:
				if st.Kernel < 0 || st.Kernel >= len(p.Kernels) {
					return fmt.Errorf("plan %s: %s launches kernel %d of %d", p.Model, where, st.Kernel, len(p.Kernels))
				}
				if want := len(p.Kernels[st.Kernel].Params); len(st.Args) != want {
					return fmt.Errorf("plan %s: %s passes %d arguments to %s, which takes %d", p.Model, where, len(st.Args), p.Kernels[st.Kernel].Name, want)
				}
				for _, a := range st.Args {
					if a.Buf >= 0 {
						if err := buf(where, a.Buf); err != nil {
							return err
						}
					}
				}
			case GemmStep:
				for _, i := range []int{st.Gemm.A, st.Gemm.B, st.Gemm.C} {
					if err := buf(where, i); err != nil {
						return err
					}
				}
			case MemsetStep:
				if err := buf(where, st.Buf); err != nil {
					return err
				}
			case CopyStep:
				if err := buf(where, st.Buf); err != nil {
					return err
				}
				if err := buf(where, st.Src); err != nil {
					return err
				}
			default:
				return fmt.Errorf("plan %s: %s has unknown kind %d", p.Model, where, st.Kind)
			}
		}
	}
	for _, c := range p.Checks {
		if err := buf("check of "+c.Op, c.Buf); err != nil {
			return err
		}
	}
	return nil
}
