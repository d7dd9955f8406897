package dsl

import (
	"slices"
	"strings"
	"testing"
)

func TestCrossEntropyWith(t *testing.T) {
	m := NewModel("ce")
	x := m.Input("x", F32, Batch, 5)
	y := m.Labels("y", Batch)
	l := CrossEntropyWith(x, y, CrossEntropyOptions{LabelSmoothing: 0.1})
	if m.Err() != nil || l.v.Attrs.F != 0.1 {
		t.Fatalf("%v, attrs %+v", m.Err(), l.v.Attrs)
	}
	m = NewModel("ce")
	x = m.Input("x", F32, Batch, 5)
	y = m.Labels("y", Batch)
	CrossEntropyWith(x, y, CrossEntropyOptions{LabelSmoothing: 1.5}) // the line the error names
	if err := m.Err(); err == nil || !strings.HasPrefix(err.Error(), "cross_entropy (dsl/crossentropy_test.go:") || !strings.Contains(err.Error(), "label smoothing 1.5") {
		t.Fatalf("label smoothing 1.5: %v", err)
	}
}

// TestCrossEntropyIgnore: the ignore index reaches the op as Attrs.Ints,
// and one that would drop a class, one an i32 label cannot hold, or one
// set without Ignore is an error at the caller's line naming the op.
func TestCrossEntropyIgnore(t *testing.T) {
	m := NewModel("ce")
	x := m.Input("x", F32, Batch, 4, 5)
	y := m.Labels("y", Batch, 4)
	l := CrossEntropyWith(x, y, CrossEntropyOptions{LabelSmoothing: 0.1, Ignore: true, IgnoreIndex: -100})
	if m.Err() != nil || !slices.Equal(l.v.Attrs.Ints, []int{-100}) || l.v.Attrs.F != 0.1 {
		t.Fatalf("%v, attrs %+v", m.Err(), l.v.Attrs)
	}
	for _, c := range []struct {
		o    CrossEntropyOptions
		want string
	}{
		{CrossEntropyOptions{Ignore: true}, "ignore index 0 is one of the 5 classes"},
		{CrossEntropyOptions{Ignore: true, IgnoreIndex: 4}, "ignore index 4 is one of the 5 classes"},
		{CrossEntropyOptions{Ignore: true, IgnoreIndex: 1 << 31}, "ignore index 2147483648: labels are i32, which cannot hold it"},
		{CrossEntropyOptions{IgnoreIndex: -100}, "IgnoreIndex -100 without Ignore"},
	} {
		m := NewModel("ce")
		x := m.Input("x", F32, Batch, 5)
		y := m.Labels("y", Batch)
		CrossEntropyWith(x, y, c.o) // the line the error names
		if err := m.Err(); err == nil || !strings.HasPrefix(err.Error(), "cross_entropy (dsl/crossentropy_test.go:") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	// An index outside [0, 5), on either side, is fine.
	for _, ign := range []int{5, -1, -(1 << 31)} {
		m := NewModel("ce")
		CrossEntropyWith(m.Input("x", F32, Batch, 5), m.Labels("y", Batch), CrossEntropyOptions{Ignore: true, IgnoreIndex: ign})
		if err := m.Err(); err != nil {
			t.Errorf("ignore index %d: %v", ign, err)
		}
	}
}
