package dsl

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Clip clips the gradients an optimizer's update reads, after gradient
// accumulation and the data-parallel all-reduce: ClipGradNorm or
// ClipGradValue.
type Clip interface {
	clip(o *ir.Optimizer) string // sets o's clipping; a problem, or ""
}

// ClipGradValue clamps every gradient to [-v, v] before the update, as
// torch.nn.utils.clip_grad_value_(params, v) before optimizer.step(): an
// elementwise op fused into the update kernel. Set as an optimizer's
// Clip: dsl.Adam{LR: 1e-3, Clip: dsl.ClipGradValue(0.5)}.
type ClipGradValue float64

func (c ClipGradValue) clip(o *ir.Optimizer) string {
	v := float64(c)
	if !(v > 0) || math.IsInf(v, 0) {
		return fmt.Sprintf("ClipGradValue(%v): want a positive, finite bound", v)
	}
	o.ClipValue = v
	return ""
}

// ClipGradNorm scales the gradients so that their global L2 norm is at
// most maxNorm before the update, as torch.nn.utils.clip_grad_norm_(params,
// maxNorm) before optimizer.step(): one kernel sums the squares of the
// flat gradient vector and leaves the coefficient on the device, where
// the fused update kernel reads it; a norm that is not finite fails the
// step, which then changes nothing. dsl.Adam{LR: 1e-3, Clip:
// dsl.ClipGradNorm(1)}.
//
// The max norm is run-time data: maxNorm is the one a session starts
// with, and Session.SetClipNorm (cmd/train -clip) changes it, checkpoints
// included. ClipGradNorm(math.Inf(1)) compiles the kernel in with
// clipping off until a max norm is set: the registered models declare
// that, so any of them clips at run time. Off, the session does not
// launch the kernel and the update scales by 1: it costs nothing.
type ClipGradNorm float64

func (c ClipGradNorm) clip(o *ir.Optimizer) string {
	v := float64(c)
	if !(v > 0) {
		return fmt.Sprintf("ClipGradNorm(%v): want a positive max norm (math.Inf(1): compiled in, off until Session.SetClipNorm)", v)
	}
	if math.IsInf(v, 1) {
		o.ClipNormOff = true
		return ""
	}
	o.ClipNorm = v
	return ""
}

// lowerClip applies the optimizer's clipping to o.
func lowerClip(c Clip, o *ir.Optimizer) string {
	if c == nil {
		return ""
	}
	return c.clip(o)
}
