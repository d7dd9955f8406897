package dsl

import (
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
