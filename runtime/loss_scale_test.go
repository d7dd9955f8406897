package runtime

import (
	"math"
	"strings"
	"testing"
)

// TestLossScaleUpdate follows torch._amp_update_scale_: a skipped step
// backs off and resets the tracker, growth-interval finite steps in a
// row grow the scale (not past f32's range), and a scale that underflows
// is an error, not a silent zero.
func TestLossScaleUpdate(t *testing.T) {
	s := &Session{plan: &Plan{Model: "m"}}
	var err error
	if s.scaler, err = newLossScale(&LossScaler{InitScale: 8, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 3}); err != nil {
		t.Fatal(err)
	}
	type st struct {
		scale   float64
		tracker int
	}
	var got []st
	for _, skip := range []bool{false, false, false, true, false, true, false, false, false, false} {
		if skip {
			if err := s.skipStep(); err != nil {
				t.Fatal(err)
			}
		} else {
			s.finiteStep()
		}
		got = append(got, st{s.LossScale(), s.scaler.tracker})
	}
	want := []st{{8, 1}, {8, 2}, {16, 0}, {8, 0}, {8, 1}, {4, 0}, {4, 1}, {4, 2}, {8, 0}, {8, 1}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("after step %d: %+v, want %+v (all: %+v)", i+1, got[i], want[i], got)
		}
	}
	if st, _ := s.Scaler(); st.Skipped != 2 || st.LastSkipped {
		t.Errorf("state %+v: want 2 skipped, the last step not", st)
	}

	// Growth stops short of f32's range.
	s.scaler.scale, s.scaler.tracker = math.MaxFloat32, 2
	s.finiteStep()
	if s.scaler.scale != math.MaxFloat32 || s.scaler.tracker != 0 {
		t.Errorf("growth past f32: scale %g tracker %d", s.scaler.scale, s.scaler.tracker)
	}

	// Backing off to a scale with no finite inverse is an error.
	s.scaler.scale = 0x1p-127
	if err := s.skipStep(); err == nil || !strings.Contains(err.Error(), "the loss scale underflowed") {
		t.Errorf("underflow: %v", err)
	}

	// A plan's bad scaler is refused.
	if _, err := newLossScale(&LossScaler{InitScale: math.Inf(1), GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 1}); err == nil {
		t.Errorf("an infinite init scale was accepted")
	}
}

// TestDecodeScaler reads GradScaler's state_dict keys and refuses what a
// scaler cannot hold.
func TestDecodeScaler(t *testing.T) {
	cur, _ := newLossScale(&LossScaler{InitScale: 65536, GrowthFactor: 2, BackoffFactor: 0.5, GrowthInterval: 2000})
	good := map[string]string{"ngen.scaler.scale": "1024", "ngen.scaler.growth_factor": "4", "ngen.scaler.backoff_factor": "0.25",
		"ngen.scaler.growth_interval": "10", "ngen.scaler._growth_tracker": "7"}
	l, set, err := decodeScaler(good, cur)
	if err != nil || !set || l.scale != 1024 || l.tracker != 7 || l.cfg.GrowthFactor != 4 || l.cfg.BackoffFactor != 0.25 || l.cfg.GrowthInterval != 10 {
		t.Errorf("good: %+v %v %v", l, set, err)
	}
	if _, set, err := decodeScaler(map[string]string{}, cur); set || err != nil {
		t.Errorf("none: %v %v", set, err)
	}
	for _, kv := range [][2]string{{"ngen.scaler.scale", "inf"}, {"ngen.scaler.scale", "0"}, {"ngen.scaler.scale", "NaN"}, {"ngen.scaler.growth_factor", "1"},
		{"ngen.scaler.backoff_factor", "1.5"}, {"ngen.scaler.growth_interval", "0"}, {"ngen.scaler._growth_tracker", "10"}, {"ngen.scaler._growth_tracker", "-1"}} {
		k, v := kv[0], kv[1]
		bad := map[string]string{}
		for a, b := range good {
			bad[a] = b
		}
		bad[k] = v
		if _, _, err := decodeScaler(bad, cur); err == nil {
			t.Errorf("%s = %s accepted", k, v)
		}
	}
	delete(good, "ngen.scaler.scale")
	if _, _, err := decodeScaler(good, cur); err == nil || !strings.Contains(err.Error(), "all or none") {
		t.Errorf("four keys of five: %v", err)
	}
}

// TestScheduleStepMeta: ngen.schedule_step, the schedule's counter, which
// a loss scaler's skipped steps put ahead of ngen.step. A file without it
// (from before it existed) counts ngen.step; one without optimizer state
// starts at 0 as its step does; a count behind ngen.step is refused.
func TestScheduleStepMeta(t *testing.T) {
	for _, c := range []struct {
		meta    map[string]string
		step    int
		withOpt bool
		want    int
		bad     bool
	}{
		{map[string]string{}, 7, true, 7, false},
		{map[string]string{"ngen.schedule_step": "12"}, 7, true, 12, false},
		{map[string]string{"ngen.schedule_step": "7"}, 7, true, 7, false},
		{map[string]string{"ngen.schedule_step": "12"}, 0, false, 0, false},
		{map[string]string{"ngen.schedule_step": "6"}, 7, true, 0, true},
		{map[string]string{"ngen.schedule_step": "x"}, 7, true, 0, true},
		{map[string]string{"ngen.schedule_step": "-1"}, 0, true, 0, true},
	} {
		got, err := scheduleStep(c.meta, c.step, c.withOpt)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("%v at step %d (optimizer state %v): %d, %v; want %d, error %v", c.meta, c.step, c.withOpt, got, err, c.want, c.bad)
		}
	}
}
