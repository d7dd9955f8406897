package compiler

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// AMP overrides a model's mixed-precision policy at compile time, as Fuse
// overrides fusion: ngen build -amp and ngen report -amp. The zero value
// keeps the model's own m.Precision call.
type AMP int

const (
	AMPModel AMP = iota // the model's policy, as declared
	AMPOff              // no mixed precision: the model compiles in f32
	AMPBF16             // dsl.AMP{Type: dsl.BF16}: no loss scaling
	AMPF16              // dsl.AMP{Type: dsl.F16}: GradScaler's default scaling
)

// ParseAMP reads a -amp flag: bf16, fp16 (or f16), off, or "" for the
// model's own policy.
func ParseAMP(s string) (AMP, error) {
	switch s {
	case "":
		return AMPModel, nil
	case "off":
		return AMPOff, nil
	case "bf16":
		return AMPBF16, nil
	case "fp16", "f16":
		return AMPF16, nil
	}
	return AMPModel, fmt.Errorf("-amp %s: want bf16, fp16 or off", s)
}

func (a AMP) String() string {
	switch a {
	case AMPOff:
		return "off"
	case AMPBF16:
		return "bf16"
	case AMPF16:
		return "fp16"
	}
	return ""
}

// withAMP is m under the policy a asks for: m itself for AMPModel, else a
// shallow copy whose Precision is replaced. The replacement is dsl.AMP's
// with its defaults (f16 scales with GradScaler's, bf16 does not), and it
// says it came from the flag, so errors name -amp instead of a line of
// the model.
func withAMP(m *ir.Model, a AMP) *ir.Model {
	if a == AMPModel {
		return m
	}
	c := *m
	switch a {
	case AMPOff:
		c.Precision = nil
	case AMPBF16:
		c.Precision = &ir.Precision{Type: ir.BF16, Flag: "-amp " + a.String()}
	case AMPF16:
		c.Precision = &ir.Precision{Type: ir.F16, Scaler: ir.GradScaler(), Flag: "-amp " + a.String()}
	}
	return &c
}

// noteF32 compiles m again without mixed precision when p has a policy:
// the report's comparison of planned memory (Program.F32).
func noteF32(p *Program, m *ir.Model, opts Options) error {
	if m.Precision == nil {
		return nil
	}
	o := opts
	o.AMP, o.Dump, o.DumpTo = AMPOff, "", nil
	f, err := Compile(m, o)
	if err != nil {
		return fmt.Errorf("the f32 plan to compare with: %w", err)
	}
	p.F32 = f
	return nil
}
