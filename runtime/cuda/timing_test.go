//go:build cuda

package cuda

import (
	"testing"
	"time"

	"github.com/ngen-ml/ngen/runtime"
)

// TestEventTiming times launches and a GEMM with CUDA events: one entry per
// call, in call order, each a positive time below the wall time of the
// whole sequence; nothing is recorded while timing is off.
func TestEventTiming(t *testing.T) {
	d := newDevice(t)
	l, err := d.Load(&runtime.Module{Name: "test", Source: testSource, Kernels: testKernels})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1 << 20
	px, py := upload(t, d, make([]float32, n)), upload(t, d, make([]float32, n))
	grid, block := runtime.Dim3{X: n / 256, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}
	axpy := func() {
		if err := d.Launch(l.Function(0), grid, block, 0, float32(2), px, py, int32(n)); err != nil {
			t.Fatal(err)
		}
	}
	axpy() // untimed
	if err := d.SetEventTiming(true); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	axpy()
	if err := d.Gemm(runtime.GemmArgs{DType: runtime.F32, M: 256, N: 256, K: 256, A: px, B: px, C: py, Alpha: 1, Batch: 1}); err != nil {
		t.Fatal(err)
	}
	axpy()
	got, err := d.EventTimes()
	wall := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"axpy_f32", "gemm", "axpy_f32"}
	if len(got) != len(want) {
		t.Fatalf("%d times, want %d: %v", len(got), len(want), got)
	}
	for i, lt := range got {
		if lt.Name != want[i] || lt.Time <= 0 || lt.Time > wall {
			t.Errorf("time %d: %s %v, want %s in (0, %v]", i, lt.Name, lt.Time, want[i], wall)
		}
	}
	t.Logf("%v (wall %v)", got, wall)
	if again, err := d.EventTimes(); err != nil || len(again) != 0 {
		t.Errorf("EventTimes again: %v, %v; want nothing", again, err)
	}
	if err := d.SetEventTiming(false); err != nil {
		t.Fatal(err)
	}
	axpy()
	if got, err := d.EventTimes(); err != nil || len(got) != 0 {
		t.Errorf("timing off: %v, %v; want nothing", got, err)
	}
}
