package runtime

import "testing"

// TestHeldLosses: a session whose losses nobody takes holds at most
// MaxHeldLosses, the newest, in order.
func TestHeldLosses(t *testing.T) {
	s := &Session{}
	n := 3*MaxHeldLosses + 5
	for i := range n {
		s.held(float64(i))
	}
	got := s.TakeLosses(nil)
	if len(got) == 0 || len(got) > MaxHeldLosses || got[len(got)-1] != float64(n-1) {
		t.Fatalf("%d losses held, the last %v; want at most %d, ending with %d", len(got), got[len(got)-1], MaxHeldLosses, n-1)
	}
	for i := 1; i < len(got); i++ {
		if got[i] != got[i-1]+1 {
			t.Fatalf("loss %d is %v after %v: not the newest in order", i, got[i], got[i-1])
		}
	}
	if more := s.TakeLosses(nil); len(more) != 0 {
		t.Fatalf("taken twice: %v", more)
	}
}
