package runtime

import (
	"math"
	"strings"
	"testing"
)

// overflowPlan has one persistent input of B×2^20 f32 elements.
var overflowPlan = &Plan{Model: "o", Symbols: []string{"B"}, Buffers: []Buffer{
	{Name: "x", Role: "input", DType: F32, Elems: Size{Mul: 1 << 20, Syms: []string{"B"}}, Placement: Persistent},
}}

// TestSizesOverflow: sizes that overflow an int64 (batch 2^62+1 sized
// buffers for one row before) are errors, and the memory arithmetic that
// MaxBatch uses saturates instead of wrapping.
func TestSizesOverflow(t *testing.T) {
	if n, ok := (Size{Mul: 1 << 40, Syms: []string{"B"}}).EvalChecked(map[string]int{"B": 1 << 30}); ok {
		t.Fatalf("2^70 evaluated to %d", n)
	}
	if n, ok := (Size{Mul: 3, Syms: []string{"B"}}).EvalChecked(map[string]int{"B": 5}); !ok || n != 15 {
		t.Fatalf("3·5 = %d, %v", n, ok)
	}
	for _, b := range []int{1<<62 + 1, 1 << 31, 1 << 29} {
		err := checkSizes(overflowPlan, map[string]int{"B": b})
		if err == nil || !(strings.Contains(err.Error(), "32-bit") || strings.Contains(err.Error(), "exceeds")) {
			t.Errorf("batch %d: %v", b, err)
		}
		if got := SessionBytes(nil, overflowPlan, SessionOptions{MaxBatch: b}); got != math.MaxInt64 {
			t.Errorf("batch %d: SessionBytes %d, want saturation", b, got)
		}
	}
	if err := checkSizes(overflowPlan, map[string]int{"B": 64}); err != nil {
		t.Fatal(err)
	}
}
