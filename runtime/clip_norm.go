package runtime

import (
	"fmt"
	"math"
	"strconv"
)

// Gradient clipping by global norm (torch.nn.utils.clip_grad_norm_) is
// compiled into a model as a kernel (GradNormKernel) and a scale in the
// fused update; its max norm is run-time data, like the rate and the
// weight decay: the kernel reads the session's as its scalar max_norm,
// and +Inf turns clipping off. A model declared with
// dsl.ClipGradNorm(math.Inf(1)) has the kernel and starts with clipping
// off, so every generated model can clip (cmd/train -clip) without a
// rebuild.

// checkClipNorm is SetClipNorm's test of a max norm.
func checkClipNorm(v float64) error {
	if math.IsNaN(v) || v <= 0 {
		return fmt.Errorf("max norm %v: want a positive norm (+Inf: no clipping)", v)
	}
	return nil
}

// initialClipNorm is the max norm a session of a plan starts with.
func initialClipNorm(o Optimizer) float64 {
	if o.ClipNorm > 0 {
		return o.ClipNorm
	}
	return math.Inf(1)
}

// SetClipNorm sets the max norm the gradients are clipped to, from the
// next update on, as clip_grad_norm_(params, v) before optimizer.step():
// v positive, or +Inf for no clipping (clip_grad_norm_ with max_norm=inf
// scales by 1). The model must compile the grad-norm kernel in
// (Plan().Optimizer.GradNorm(): a Clip: dsl.ClipGradNorm(...) on its
// optimizer, math.Inf(1) for off by default). Checkpoints carry it.
func (s *Session) SetClipNorm(v float64) error {
	if err := s.alive("SetClipNorm"); err != nil {
		return err
	}
	if !s.plan.Optimizer.GradNorm() {
		return fmt.Errorf("%s: SetClipNorm(%v): the model has no gradient clipping compiled in: declare Clip: dsl.ClipGradNorm(math.Inf(1)) on its optimizer (off until SetClipNorm) and regenerate it", s.plan.Model, v)
	}
	if err := checkClipNorm(v); err != nil {
		return fmt.Errorf("%s: SetClipNorm: %w", s.plan.Model, err)
	}
	s.clip = v
	return nil
}

// ClipNorm is the max norm of the next update's clipping: +Inf when off,
// and for a model without the grad-norm kernel.
func (s *Session) ClipNorm() float64 { return s.clip }

// decodeClipNorm reads ngen.clip_norm, the run-time max norm of the run
// that saved a checkpoint, for a model whose optimizer is o; withOpt says
// the file has optimizer state (it resumes training). A model without
// the grad-norm kernel cannot resume a run that clipped: refused, unless
// the file holds weights alone (inference, or a fresh optimizer).
func decodeClipNorm(meta map[string]string, o Optimizer, withOpt bool) (v float64, set bool, err error) {
	str, ok := meta["ngen.clip_norm"]
	if !ok {
		return 0, false, nil
	}
	v, err = strconv.ParseFloat(str, 64)
	if err == nil {
		err = checkClipNorm(v)
	}
	if err != nil {
		return 0, false, fmt.Errorf("ngen.clip_norm %q: %v", str, err)
	}
	if !o.GradNorm() {
		if withOpt && !math.IsInf(v, 1) {
			return 0, false, fmt.Errorf("ngen.clip_norm %s: the run clipped its gradients, and this model has no gradient clipping compiled in (dsl.ClipGradNorm)", str)
		}
		return 0, false, nil
	}
	return v, true, nil
}
