package fuzzgen

import (
	"testing"
)

// TestGenerateBuilds draws many specs and declares each with the DSL: the
// generator's shape rules must agree with the DSL's (a disagreement is a
// bug in one of them), and every op must be drawn.
func TestGenerateBuilds(t *testing.T) {
	n := 600
	if testing.Short() {
		n = 150
	}
	seen := map[string]int{}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		s := Generate(seed, Config{})
		for _, op := range s.Ops() {
			seen[op]++
		}
		if _, err := s.Build(); err != nil {
			t.Errorf("seed %d: %v\n%s", seed, err, s.Source("Model"))
		}
	}
	for _, op := range OpNames() {
		if seen[op] == 0 {
			t.Errorf("op %s never drawn in %d specs", op, n)
		}
	}
	t.Logf("ops drawn: %v", seen)
}
