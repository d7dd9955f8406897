package dsl

import (
	"fmt"
	"strings"
	"testing"
)

func TestSeqShapes(t *testing.T) {
	m := NewModel("seq")
	x := m.Tokens("x", Batch, 7)
	e := m.Embedding("emb", x, 37, 11, F32) // [B,7,11]
	for _, c := range []struct {
		got  *Tensor
		want string
	}{
		{e, "[B,7,11]"},
		{Transpose(e, 0, 1), "[7,B,11]"},
		// torch.transpose(x, 1, 1) is x (fuzzgen found the DSL refusing
		// it as "axis 1 repeated").
		{Transpose(e, 1, 1), "[B,7,11]"},
		{Transpose(e, -1, 2), "[B,7,11]"},
		{Permute(e, 2, 0, 1), "[11,B,7]"},
		{Slice(e, 1, 2, 5), "[B,3,11]"},
		{Select(e, 1, 6), "[B,11]"},
		{Select(e, -1, 0), "[B,7]"},
		{Concat(1, e, Slice(e, 1, 0, 2)), "[B,9,11]"},
		{Stack(1, Select(e, 1, 0), Select(e, 1, 1)), "[B,2,11]"},
		{Stack(-1, Select(e, 1, 0), Select(e, 1, 1)), "[B,11,2]"},
		{BatchMatMul(e, e, false, true), "[B,7,7]"},
	} {
		if c.got.Shape() != c.want {
			t.Errorf("shape %s, want %s", c.got.Shape(), c.want)
		}
	}
	if err := m.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestSeqErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct {
		name string
		f    func(m *Model, e *Tensor) int
		want string
	}{
		{"slice out of range", func(m *Model, e *Tensor) int { l := line(); Slice(e, 1, 3, 9); return l }, "slice (dsl/seq_test.go:%d): slice [3:9) of axis 1 (size 7)"},
		{"slice of the batch", func(m *Model, e *Tensor) int { l := line(); Slice(e, 0, 0, 1); return l }, "slice (dsl/seq_test.go:%d): cannot slice the symbolic axis 0"},
		{"transpose out of range", func(m *Model, e *Tensor) int { l := line(); Transpose(e, 0, 3); return l }, "transpose (dsl/seq_test.go:%d): axis 3 out of range for rank 3"},
		{"bad perm", func(m *Model, e *Tensor) int { l := line(); Permute(e, 0, 0, 1); return l }, "permute (dsl/seq_test.go:%d): perm [0 0 1] is not a permutation"},
		{"concat mismatch", func(m *Model, e *Tensor) int { l := line(); Concat(1, e, Slice(e, 2, 0, 3)); return l }, "concat (dsl/seq_test.go:%d): operand 1 [B,7,3] and operand 0 [B,7,11] differ"},
		{"float ids", func(m *Model, e *Tensor) int { l := line(); m.Embedding("e2", e, 5, 3, F32); return l }, "embedding (dsl/seq_test.go:%d): token ids must be i32"},
		{"bmm inner", func(m *Model, e *Tensor) int { l := line(); BatchMatMul(e, e, false, false); return l }, "batch_matmul (dsl/seq_test.go:%d): inner dimensions differ"},
	} {
		m := NewModel("bad")
		e := m.Embedding("emb", m.Tokens("x", Batch, 7), 37, 11, F32)
		l := c.f(m, e)
		want := fmt.Sprintf(c.want, l)
		if err := m.Err(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, want)
		}
	}
}
