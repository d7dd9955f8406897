package dsl

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// TestCheckpointMarksSegments: the ops declared inside each Checkpoint
// carry its segment through the JSON that carries a model to the compiler;
// ops outside carry none.
func TestCheckpointMarksSegments(t *testing.T) {
	m := NewModel("ck")
	x := m.Input("x", F32, Batch, 8)
	y := m.Labels("y", Batch)
	h := m.Checkpoint(func() *Tensor { return ReLU(m.Linear("fc1", x, 8)) })
	h = m.Checkpoint(func() *Tensor { return Dropout(ReLU(m.Linear("fc2", h, 8)), 0.5) })
	logits := m.Linear("fc3", h, 3)
	m.Output(logits)
	m.Loss(CrossEntropy(logits, y))
	m.Optimizer(Adam{LR: 1e-3})
	model, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(model)
	if err != nil {
		t.Fatal(err)
	}
	var back ir.Model
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	got := map[int]int{}
	for _, v := range back.Forward.Values {
		got[v.Checkpoint]++
	}
	if got[1] == 0 || got[2] == 0 || len(got) != 3 {
		t.Fatalf("segments %v", got)
	}
	for _, v := range back.Forward.Values {
		if v.Op == "cross_entropy" && v.Checkpoint != 0 {
			t.Fatal("the loss is outside every segment")
		}
	}

	m2 := NewModel("nil")
	m2.Checkpoint(nil)
	if err := m2.Err(); err == nil || !strings.Contains(err.Error(), "checkpoint (dsl/checkpoint_test.go:") {
		t.Fatalf("nil body: %v", err)
	}
}
