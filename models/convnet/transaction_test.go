package convnet_test

import (
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// stateOf reads every parameter and every piece of state (optimizer
// moments, batch norm's running statistics) bit for bit.
func stateOf(t *testing.T, s *runtime.Session) map[string][]uint64 {
	t.Helper()
	out := map[string][]uint64{"steps": {uint64(s.Steps())}}
	for _, role := range []string{"param", "state"} {
		for _, name := range s.Names(role) {
			i, err := s.Lookup(role, name)
			if err != nil {
				t.Fatal(err)
			}
			v, err := s.ReadFloats(i)
			if err != nil {
				t.Fatal(err)
			}
			bits := make([]uint64, len(v))
			for k, x := range v {
				bits[k] = math.Float64bits(x)
			}
			out[role+":"+name] = bits
		}
	}
	return out
}

func diff(a, b map[string][]uint64) []string {
	var out []string
	for k, va := range a {
		vb := b[k]
		if len(va) != len(vb) {
			out = append(out, k)
			continue
		}
		for i := range va {
			if va[i] != vb[i] {
				out = append(out, k)
				break
			}
		}
	}
	return out
}

// TestFailedStepChangesNothing: a step that fails (a label out of range,
// a NaN in the input) leaves parameters, Adam's moments, batch norm's
// running statistics and the step count exactly as they were, in the fused
// and the unfused package; the next step works.
func TestFailedStepChangesNothing(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, v := range variants {
		for _, mk := range []func(runtime.Device, int, uint64) (model, error){v.fused, v.unfused} {
			m, err := mk(dev, 4, 9)
			if err != nil {
				t.Fatal(err)
			}
			x, y := batch(4, 3)
			if _, err := m.Step(x, y); err != nil {
				t.Fatal(err)
			}
			before := stateOf(t, m.Session())
			bad := append([]int32(nil), y...)
			bad[2] = 99
			if _, err := m.Step(x, bad); err == nil || !strings.Contains(err.Error(), "label 99 at row 2") {
				t.Fatalf("%s: label out of range: %v", v.name, err)
			}
			if d := diff(stateOf(t, m.Session()), before); len(d) > 0 {
				t.Fatalf("%s: a label out of range changed %v", v.name, d)
			}
			nan := append([]float32(nil), x...)
			nan[300] = float32(math.NaN())
			if _, err := m.Step(nan, y); err == nil || !strings.Contains(err.Error(), "is NaN") {
				t.Fatalf("%s: NaN input: %v", v.name, err)
			}
			if d := diff(stateOf(t, m.Session()), before); len(d) > 0 {
				t.Fatalf("%s: a NaN in the input changed %v", v.name, d)
			}
			if l, err := m.Step(x, y); err != nil || math.IsNaN(float64(l)) {
				t.Fatalf("%s: next step: %v %v", v.name, l, err)
			}
			if d := diff(stateOf(t, m.Session()), before); len(d) == 0 {
				t.Fatalf("%s: a good step changed nothing", v.name)
			}
			m.Close()
		}
	}
}
