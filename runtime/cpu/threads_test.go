package cpu

import (
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

// TestThreadBound (issue 27): an absurd thread count is an error, not a
// process killed by "C malloc failed" (1<<60) or a heap corrupted by a
// launch description whose size wrapped (1<<61).
func TestThreadBound(t *testing.T) {
	for _, n := range []int{-1, MaxThreads + 1, 1 << 60, 1 << 61, math.MaxInt} {
		if d, err := New(Options{Threads: n}); err == nil || !strings.Contains(err.Error(), "want 0 (every core) to 4096") {
			if d != nil {
				d.Close()
			}
			t.Errorf("Threads %d: err = %v", n, err)
		}
		if d, err := runtime.OpenDevice("cpu", n); err == nil {
			d.Close()
			t.Errorf("OpenDevice(cpu, %d) accepted", n)
		}
	}
	d, err := New(Options{Threads: MaxThreads})
	if err != nil {
		t.Fatalf("Threads %d: %v", MaxThreads, err)
	}
	d.Close()
}

// TestLaunchBytes: the launch description's size never wraps.
func TestLaunchBytes(t *testing.T) {
	for _, tc := range []struct {
		nargs, workers, launch int
		ok                     bool
	}{
		{16, 4, 64, true},
		{16, 1 << 61, 64, false}, // wrapped to a small size before
		{16, 1 << 60, 64, false},
		{math.MaxInt / 8, 1, 64, false},
		{math.MaxInt / 16, math.MaxInt / 64, 64, false}, // each part fits, the sum does not
		{-1, 1, 64, false},
	} {
		n, ok := launchBytes(tc.nargs, tc.workers, tc.launch)
		if ok != tc.ok || ok && n != 16*tc.nargs+tc.workers*tc.launch {
			t.Errorf("launchBytes(%d, %d, %d) = %d, %v", tc.nargs, tc.workers, tc.launch, n, ok)
		}
	}
}

// TestOrdinal (issue 27's second hostile pass): "cpu:7" opened the host
// and ignored the 7, so cmd/train -device cpu:7 trained without a word.
func TestOrdinal(t *testing.T) {
	for _, spec := range []string{"cpu:1", "cpu:7"} {
		if d, err := runtime.OpenDevice(spec, 1); err == nil || !strings.Contains(err.Error(), "the CPU backend has one device") {
			if d != nil {
				d.Close()
			}
			t.Errorf("OpenDevice(%q): err = %v", spec, err)
		}
	}
	for _, spec := range []string{"cpu", "cpu:0"} {
		d, err := runtime.OpenDevice(spec, 1)
		if err != nil {
			t.Fatalf("OpenDevice(%q): %v", spec, err)
		}
		d.Close()
	}
}
