package runtime

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Loaded optimizer state must be state that some run could have written.
// A finite but huge Adam exp_avg (3e38, say) passes every per-value check,
// and the next update, whose gradients the device guard finds finite,
// writes non-finite parameters. Bounding exp_avg by exp_avg_sq closes
// that class: the bound below caps every Adam update at a small multiple
// of the learning rate, whatever the gradients were.
//
// The bound. With m_0 = v_0 = 0 and the gradients g_1..g_t that the
// moments saw (weight decay included: both moments see the same g),
//
//	m_t = (1-β1) Σ_k β1^(t-k) g_k,   v_t = (1-β2) Σ_k β2^(t-k) g_k².
//
// Writing β1^j g = (β1^j/β2^(j/2)) · (β2^(j/2) g) and applying
// Cauchy–Schwarz to the sum over k, with r = β1²/β2,
//
//	|Σ_k β1^(t-k) g_k| ≤ sqrt(Σ_{j<t} r^j) · sqrt(Σ_k β2^(t-k) g_k²)
//	                  = sqrt(S_t) · sqrt(v_t/(1-β2)),
//
// so |m_t| ≤ C_t·sqrt(v_t) with C_t = (1-β1)/sqrt(1-β2) · sqrt(S_t), and
// S_t = (1-r^t)/(1-r) < 1/(1-r) when β1² < β2 (PyTorch's defaults:
// 0.81 < 0.999). The limit C_∞ = (1-β1)/sqrt(1-β2)/sqrt(1-β1²/β2) holds
// at every step; the step count's C_t is tighter (at t = 1 it is
// (1-β1)/sqrt(1-β2), met with equality). For β1² ≥ β2, S_t grows with t
// and the bound may be +Inf: such state is then only checked for being
// finite and v ≥ 0.
//
// Rounding. A run in floating point computes v a little off, and loses
// the terms (1-β2)·g² that fall below the smallest normal number N (flush
// to zero, or the subnormals' lost digits). Each lost term is below N, and
// the decays sum to at most 1/(1-β2), so the true v is at most
// v + N/(1-β2); the check allows that, and a relative 1e-3 for the
// roundings of m and v (a few ulps per step, which the decay keeps from
// growing).
//
// The step count. A run at step 0 has never updated, so its moments are
// zero; nonzero Adam state at step 0 is rejected. (SGD is not held to
// this: PyTorch's SGD keeps no step count, so scripts/safetensors_io.py
// writes its momentum at step 0. A momentum buffer has no invariant
// beyond being finite, which every tensor is checked for.)

const adamRoundTol = 1e-3

// adamBound is C_t for step t ≥ 1, or +Inf when no bound applies.
func adamBound(b1, b2 float64, t int) float64 {
	if !(b1 >= 0 && b1 < 1 && b2 > 0 && b2 < 1) || t < 1 {
		return math.Inf(1)
	}
	r := b1 * b1 / b2
	var s float64
	switch {
	case r == 1:
		s = float64(t)
	default:
		s = (1 - math.Pow(r, float64(t))) / (1 - r)
	}
	return (1 - b1) / math.Sqrt(1-b2) * math.Sqrt(s)
}

// checkAdamState checks the Adam moments of a decoded checkpoint (got, by
// tensor name) against the bound above at the checkpoint's step.
func checkAdamState(o Optimizer, step int, names []string, ents map[string]ckptEntry, got map[string][]byte) error {
	if o.Kind != "adam" && o.Kind != "adamw" {
		return nil
	}
	c := adamBound(o.Beta1, o.Beta2, step) * (1 + adamRoundTol)
	for _, n := range names {
		e := ents[n]
		const suf = ".exp_avg"
		if !e.opt || len(n) < len(suf) || n[len(n)-len(suf):] != suf {
			continue
		}
		md, ok := got[n]
		if !ok {
			continue // no optimizer state: a fresh optimizer
		}
		vd, ok := got[n+"_sq"]
		if !ok {
			return fmt.Errorf("checkpoint has %q but not %q", n, n+"_sq")
		}
		floor := math.SmallestNonzeroFloat64
		switch e.dtype {
		case F32:
			floor = 0x1p-126 / (1 - o.Beta2)
		case F64:
			floor = 0x1p-1022 / (1 - o.Beta2)
		}
		for k := int64(0); k < e.n; k++ {
			m, v := elem(md, e.dtype, k), elem(vd, e.dtype, k)
			if step == 0 && (m != 0 || v != 0) {
				return fmt.Errorf("checkpoint tensor %q is nonzero at element %d at step 0, before any update (ngen.step is missing or wrong)", n, k)
			}
			if math.Abs(m) > c*math.Sqrt(v+floor) {
				return fmt.Errorf("checkpoint tensor %q is %g at element %d, more than Adam's moments allow at step %d (|exp_avg| ≤ %.4g·sqrt(exp_avg_sq), exp_avg_sq = %g): no run writes this", n, m, k, step, c, v)
			}
		}
	}
	return nil
}

// elem reads element k of little-endian data of type dt as a float64.
func elem(d []byte, dt DType, k int64) float64 {
	switch dt {
	case F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(d[4*k:])))
	case F64:
		return math.Float64frombits(binary.LittleEndian.Uint64(d[8*k:]))
	}
	return 0
}
