package dsl

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/compiler/ir"
)

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
	// Type is BF16 or F16.
	Type DType
	// Scaler is dynamic loss scaling (PyTorch's GradScaler). nil takes
	// the type's default, as PyTorch's recipes do: F16 scales with
	// GradScaler's defaults (GradScaler()), whose range needs it, and
	// BF16 does not scale. Set it to change the defaults, or to scale a
	// BF16 model.
	Scaler *LossScaler
}

// LossScaler configures dynamic loss scaling, with the meaning of
// torch.cuda.amp.GradScaler's arguments: the loss's gradient is seeded
// with the scale, the update unscales, a step whose gradients hold an
// inf or NaN changes nothing (it is skipped, not an error) and multiplies
// the scale by BackoffFactor, and GrowthInterval finite steps in a row
// multiply it by GrowthFactor. Every field is used as given: start from
// GradScaler() to change one.
type LossScaler struct {
	InitScale      float64 // > 0 and finite in f32 (GradScaler: 2^16)
	GrowthFactor   float64 // > 1 (2)
	BackoffFactor  float64 // in (0, 1) (0.5)
	GrowthInterval int     // ≥ 1 (2000)
}

// GradScaler returns PyTorch's GradScaler defaults: init scale 2^16,
// growth factor 2, backoff factor 0.5, growth interval 2000.
func GradScaler() *LossScaler {
	d := ir.GradScaler()
	return &LossScaler{InitScale: d.Init, GrowthFactor: d.Growth, BackoffFactor: d.Backoff, GrowthInterval: d.Interval}
}

// Precision sets the model's precision policy, for example
// m.Precision(dsl.AMP{Type: dsl.F16}) or, with a scaler of its own,
//
//	sc := dsl.GradScaler()
//	sc.GrowthInterval = 500
//	m.Precision(dsl.AMP{Type: dsl.F16, Scaler: sc})
//
// A model declares it once, and its parameters must be f32.
func (m *Model) Precision(a AMP) {
	pos := callerPos()
	switch {
	case m.m.Precision != nil:
		m.fail(pos, "precision", "the precision is already set (at %s): a model has one", m.m.Precision.Pos)
		return
	case a.Type != BF16 && a.Type != F16:
		m.fail(pos, "precision", "AMP type %s: want dsl.BF16 or dsl.F16", a.Type)
		return
	}
	for _, v := range m.m.Forward.Values {
		if v.DType == F64 {
			m.fail(pos, "precision", "mixed precision needs an f32 model, but %s %q (%s) is f64", v.Role, v.Name, v.Pos)
			return
		}
	}
	sc := a.Scaler
	if sc == nil && a.Type == F16 {
		sc = GradScaler()
	}
	pr := &ir.Precision{Type: a.Type, Pos: pos}
	if sc != nil {
		if problem := checkScaler(sc); problem != "" {
			m.fail(pos, "precision", "loss scaler: %s", problem)
			return
		}
		pr.Scaler = &ir.LossScaler{Init: sc.InitScale, Growth: sc.GrowthFactor, Backoff: sc.BackoffFactor, Interval: sc.GrowthInterval}
	}
	m.m.Precision = pr
}

// checkScaler says what is wrong with a scaler's configuration, or "".
func checkScaler(sc *LossScaler) string {
	// The scale is an f32, as GradScaler's _scale tensor is.
	if s := float64(float32(sc.InitScale)); !(s > 0) || math.IsInf(s, 0) {
		return fmt.Sprintf("InitScale %v: want a positive scale, finite and not zero in f32", sc.InitScale)
	}
	if !(sc.GrowthFactor > 1) || math.IsInf(sc.GrowthFactor, 0) {
		return fmt.Sprintf("GrowthFactor %v: want a finite factor > 1", sc.GrowthFactor)
	}
	if !(sc.BackoffFactor > 0 && sc.BackoffFactor < 1) {
		return fmt.Sprintf("BackoffFactor %v: want a factor in (0, 1)", sc.BackoffFactor)
	}
	if sc.GrowthInterval < 1 {
		return fmt.Sprintf("GrowthInterval %d: want at least 1 step", sc.GrowthInterval)
	}
	return ""
}
