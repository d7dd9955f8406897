package dsl

import (
	"fmt"
	"strings"
	"testing"
)

// TestHugeDimensions: the second adversarial pass built an Input of width
// 1<<62 (planned at 6144 bytes) and a Linear of width 1<<40, and an input
// whose dimensions' product wraps reached Linear as "dimension 0". Each
// now fails at the line that declares the size.
func TestHugeDimensions(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(m *Model) int
		want  string
	}{
		{"input 1<<62", func(m *Model) int {
			l := line() + 1
			m.Input("x", F32, Batch, 1<<62)
			return l
		}, "input (dsl/bounds_test.go:%d): dimension 4611686018427387904 exceeds the kernels' 32-bit range"},
		{"product wraps", func(m *Model) int {
			l := line() + 1
			m.Input("x", F32, Batch, 1<<30, 1<<30, 1<<30)
			return l
		}, "input (dsl/bounds_test.go:%d): dimension 1073741824 takes the product past 2^48 elements a row"},
		{"linear 1<<40", func(m *Model) int {
			x := m.Input("x", F32, Batch, 4)
			l := line() + 1
			m.Linear("fc", x, 1<<40)
			return l
		}, "param (dsl/bounds_test.go:%d): fc.weight: dimension 1099511627776 exceeds the kernels' 32-bit range"},
	} {
		m := NewModel("huge")
		l := c.build(m)
		want := fmt.Sprintf(c.want, l)
		if err := m.Err(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, want)
		}
	}
}
