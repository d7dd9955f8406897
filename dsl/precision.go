package dsl

import "github.com/ngen-ml/ngen/compiler/ir"

// The 16-bit float types of mixed precision (AMP.Type).
const (
	BF16 = ir.BF16
	F16  = ir.F16
)

// AMP is automatic mixed precision, torch.autocast's policy: GEMM inputs
// and the activations between GEMMs are stored in Type with f32
// accumulation, while parameters, gradients, the optimizer and the ops on
// autocast's f32 list (cross-entropy, softmax, normalisation statistics,
// reductions) stay f32. See docs/AMP.md for what is built.
type AMP struct {
	// Type is BF16 or F16. Only BF16 is built; F16 needs dynamic loss
	// scaling, which is not.
	Type DType
}

// Precision sets the model's precision policy, for example
// m.Precision(dsl.AMP{Type: dsl.BF16}). A model declares it once, and
// its parameters must be f32.
func (m *Model) Precision(a AMP) {
	pos := callerPos()
	switch {
	case m.m.Precision != nil:
		m.fail(pos, "precision", "the precision is already set (at %s): a model has one", m.m.Precision.Pos)
		return
	case a.Type == F16:
		m.fail(pos, "precision", "f16 mixed precision needs dynamic loss scaling, which is not built yet: use dsl.BF16")
		return
	case a.Type != BF16:
		m.fail(pos, "precision", "AMP type %s: want dsl.BF16 or dsl.F16", a.Type)
		return
	}
	for _, v := range m.m.Forward.Values {
		if v.DType == F64 {
			m.fail(pos, "precision", "mixed precision needs an f32 model, but %s %q (%s) is f64", v.Role, v.Name, v.Pos)
			return
		}
	}
	m.m.Precision = &ir.Precision{Type: a.Type, Pos: pos}
}
