package runtime

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Dynamic loss scaling (PyTorch's torch.cuda.amp.GradScaler), for mixed
// precision in f16 (dsl.AMP): the backward pass starts from the run-time
// scalar loss_scale instead of 1, so small gradients survive f16's range,
// and the update multiplies the gradients by inv_scale = 1/scale before
// anything else reads them (compiler/optimizer.go; the update check and
// the grad-norm kernel too, codegen/guard.go). The scaler's verdict is
// the transactional guard's (compiler/guard.go): a step whose loss or
// gradients hold an inf or NaN commits nothing on the device. Under a
// scaler that is routine, not an error: the step is skipped (the step
// counter, Adam's t, stays, as optimizer.step is skipped; the schedule's
// counter advances, as a PyTorch loop calls scheduler.step() after a
// skipped scaler.step too), and the scale follows
// torch._amp_update_scale_: times the backoff factor after a skipped
// step, times the growth factor after growth-interval finite steps in a
// row (unless that overflows f32), the growth tracker counting them.
//
// The scale is an f32, as GradScaler's _scale tensor is, and inv_scale
// is float32(1/float64(scale)), as GradScaler's
// _scale.double().reciprocal().float().

// Kernel scalars of loss scaling.
const (
	LossScaleScalar = "loss_scale" // the loss's gradient seed (the gradient phase)
	InvScaleScalar  = "inv_scale"  // the update's unscale factor (the update phase)
)

// LossScaler is dynamic loss scaling's configuration, GradScaler's
// constructor arguments.
type LossScaler struct {
	InitScale      float64 `json:",omitzero"`
	GrowthFactor   float64 `json:",omitzero"`
	BackoffFactor  float64 `json:",omitzero"`
	GrowthInterval int     `json:",omitzero"`
}

// check says what is wrong with a configuration, or nil.
func (c LossScaler) check() error {
	if s := float64(float32(c.InitScale)); !(s > 0) || math.IsInf(s, 0) {
		return fmt.Errorf("init scale %v: want a positive scale, finite and not zero in f32", c.InitScale)
	}
	if !(c.GrowthFactor > 1) || math.IsInf(c.GrowthFactor, 0) {
		return fmt.Errorf("growth factor %v: want a finite factor > 1", c.GrowthFactor)
	}
	if !(c.BackoffFactor > 0 && c.BackoffFactor < 1) {
		return fmt.Errorf("backoff factor %v: want a factor in (0, 1)", c.BackoffFactor)
	}
	if c.GrowthInterval < 1 {
		return fmt.Errorf("growth interval %d: want at least 1 step", c.GrowthInterval)
	}
	return nil
}

// ScalerState is a session's loss scaler: its configuration (which a
// checkpoint may change, as GradScaler.load_state_dict does) and state.
type ScalerState struct {
	LossScaler
	Scale         float64 // the scale of the next step (an f32 value)
	GrowthTracker int     // finite steps in a row since the scale last changed
	Skipped       int     // steps this session skipped (not checkpointed)
	LastSkipped   bool    // the last update was skipped
}

// lossScale is the session's scaler; on is false without one.
type lossScale struct {
	on          bool
	cfg         LossScaler
	scale       float32
	tracker     int
	skipped     int
	lastSkipped bool
}

func newLossScale(c *LossScaler) (lossScale, error) {
	if c == nil {
		return lossScale{}, nil
	}
	if err := c.check(); err != nil {
		return lossScale{}, fmt.Errorf("the plan's loss scaler: %w", err)
	}
	return lossScale{on: true, cfg: *c, scale: float32(c.InitScale)}, nil
}

// invScale is the update's unscale factor.
func (l *lossScale) invScale() float32 { return float32(1 / float64(l.scale)) }

// errSkip is check's verdict on a step whose gradients are not finite
// under loss scaling: skipped, not failed.
var errSkip = errors.New("non-finite gradients under loss scaling: step skipped")

// LossScale is the scale the next step's loss gradient is seeded with:
// 1 for a model without loss scaling, as GradScaler.get_scale() is when
// disabled.
func (s *Session) LossScale() float64 {
	if s == nil || !s.scaler.on {
		return 1
	}
	return float64(s.scaler.scale)
}

// StepSkipped reports whether the last update was skipped because its
// loss or gradients (on any rank of a data-parallel group, or summed
// over micro-batches or ranks) held an inf or NaN under loss scaling.
func (s *Session) StepSkipped() bool { return s != nil && s.scaler.lastSkipped }

// Scaler returns the session's loss scaler, and false for a model
// without one.
func (s *Session) Scaler() (ScalerState, bool) {
	if s == nil || !s.scaler.on {
		return ScalerState{}, false
	}
	l := &s.scaler
	return ScalerState{LossScaler: l.cfg, Scale: float64(l.scale), GrowthTracker: l.tracker, Skipped: l.skipped, LastSkipped: l.lastSkipped}, true
}

// skipStep records a skipped update: the schedule's counter advances
// (not the step counter) and the scale backs off. A scale that reaches
// 0, or whose inverse overflows f32, is an error: the loss or the
// gradients are not finite at any scale (a NaN from the data, or a
// forward pass that overflows), and training cannot go on.
func (s *Session) skipStep() error {
	l := &s.scaler
	s.schedT++
	s.markClock()
	l.skipped++
	l.lastSkipped = true
	l.scale = float32(float64(l.scale) * l.cfg.BackoffFactor)
	l.tracker = 0
	if l.scale == 0 || math.IsInf(float64(l.invScale()), 0) {
		return fmt.Errorf("%s: the loss scale underflowed to %g after %d skipped step(s) (step %d's loss or gradients were not finite, as every step's since the scale was reasonable): they are not finite at any scale", s.plan.Model, l.scale, l.skipped, s.t+1)
	}
	return nil
}

// finiteStep records an update that ran, and grows the scale after
// GrowthInterval of them in a row (not past f32's range).
func (s *Session) finiteStep() {
	l := &s.scaler
	if !l.on {
		return
	}
	l.lastSkipped = false
	if l.tracker+1 < l.cfg.GrowthInterval {
		l.tracker++
		return
	}
	if g := float32(float64(l.scale) * l.cfg.GrowthFactor); !math.IsInf(float64(g), 0) {
		l.scale = g
	}
	l.tracker = 0
}

// sumOverflowed reports whether err, an update check's failure under
// loss scaling, came from gradients that are not finite though every
// micro-batch's were: their sum over the micro-batches, or over the
// ranks of a data-parallel group, overflowed f32 (a bf16 model's scaled
// gradients can reach f32's range). GradScaler checks the gradients
// the step applies, so that is a skip, not an error. The update check
// cannot tell it from an update that overflows with finite gradients;
// the host reads the gradient vector, on this failure path only.
func (s *Session) sumOverflowed(err error) bool {
	var ue *UpdateError
	if !s.scaler.on || !errors.As(err, &ue) {
		return false
	}
	g, _, e := s.gradsVec()
	if e != nil {
		return false
	}
	v, e := s.ReadFloats(g)
	if e != nil {
		return false
	}
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return true
		}
	}
	return false
}

// Checkpoint metadata of the scaler: GradScaler.state_dict()'s keys
// after ngen.scaler.
const scalerPrefix = "ngen.scaler."

var scalerKeys = []string{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}

// saveScaler adds the scaler's state to a checkpoint's metadata.
func (s *Session) saveScaler(meta map[string]string) {
	l := &s.scaler
	if !l.on {
		return
	}
	meta[scalerPrefix+"scale"] = strconv.FormatFloat(float64(l.scale), 'g', -1, 32)
	meta[scalerPrefix+"growth_factor"] = strconv.FormatFloat(l.cfg.GrowthFactor, 'g', -1, 64)
	meta[scalerPrefix+"backoff_factor"] = strconv.FormatFloat(l.cfg.BackoffFactor, 'g', -1, 64)
	meta[scalerPrefix+"growth_interval"] = strconv.Itoa(l.cfg.GrowthInterval)
	meta[scalerPrefix+"_growth_tracker"] = strconv.Itoa(l.tracker)
}

// decodeScaler reads a checkpoint's scaler state for a model whose
// scaler is cur (on false: none, and the file's is ignored: a model
// without scaling has no use for it). A file without it (weights alone,
// or from a run without scaling) leaves the session's: set is false.
// All five keys or none.
func decodeScaler(meta map[string]string, cur lossScale) (l lossScale, set bool, err error) {
	n := 0
	for _, k := range scalerKeys {
		if _, ok := meta[scalerPrefix+k]; ok {
			n++
		}
	}
	if !cur.on || n == 0 {
		return cur, false, nil
	}
	if n != len(scalerKeys) {
		return cur, false, fmt.Errorf("%d of the loss scaler's %d keys (%s...): all or none", n, len(scalerKeys), scalerPrefix)
	}
	f := func(k string) float64 {
		x, e := strconv.ParseFloat(meta[scalerPrefix+k], 64)
		if e != nil && err == nil {
			err = fmt.Errorf("%s%s %q is not a number", scalerPrefix, k, meta[scalerPrefix+k])
		}
		return x
	}
	i := func(k string) int {
		x, e := strconv.Atoi(meta[scalerPrefix+k])
		if (e != nil || x < 0) && err == nil {
			err = fmt.Errorf("%s%s %q is not a count", scalerPrefix, k, meta[scalerPrefix+k])
		}
		return x
	}
	l = cur
	l.cfg = LossScaler{InitScale: f("scale"), GrowthFactor: f("growth_factor"), BackoffFactor: f("backoff_factor"), GrowthInterval: i("growth_interval")}
	l.tracker = i("_growth_tracker")
	if err != nil {
		return cur, false, err
	}
	// The saved scale must be a scale a session could hold: as an init
	// scale, and its inverse finite.
	if e := l.cfg.check(); e != nil {
		return cur, false, fmt.Errorf("loss scaler: %v", e)
	}
	if l.tracker >= l.cfg.GrowthInterval {
		return cur, false, fmt.Errorf("loss scaler: _growth_tracker %d reaches growth_interval %d", l.tracker, l.cfg.GrowthInterval)
	}
	l.scale = float32(l.cfg.InitScale)
	if math.IsInf(float64(l.invScale()), 0) {
		return cur, false, fmt.Errorf("loss scaler: scale %g has no finite inverse in f32", l.scale)
	}
	l.cfg.InitScale = cur.cfg.InitScale
	return l, true, nil
}
