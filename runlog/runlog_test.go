package runlog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRoundTrip: what a Writer writes, Read gives back, each record a
// line of its own as it is written; a last line cut short by a crash is
// dropped, a bad line elsewhere is an error naming it.
func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.jsonl")
	w, err := Create(path, Run{Framework: "ngen", Model: "mlp", Device: "cpu", Batch: 64})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if err := w.Step(Step{Step: i, Epoch: 1, Loss: 2.5 - 0.25*float64(i), LR: 1e-3, SamplesPerS: 100, MemAllocated: 10, MemPeak: 12}); err != nil {
			t.Fatal(err)
		}
		// Written through at once: the file has the line already.
		b, _ := os.ReadFile(path)
		if n := bytes.Count(b, []byte("\n")); n != 1+i {
			t.Fatalf("after step %d the file has %d lines", i, n)
		}
	}
	if err := w.Eval(Eval{Step: 3, Epoch: 1, TrainLoss: 2, TestAcc: F(0.5), SamplesPerS: 99}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	l, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.Run.Model != "mlp" || l.Run.Batch != 64 || len(l.Steps) != 3 || len(l.Evals) != 1 {
		t.Fatalf("read back %+v", l)
	}
	if s := l.Steps[2]; s.Loss != 1.75 || s.Step != 3 || s.MemPeak != 12 || s.Time <= 0 {
		t.Fatalf("last step %+v", s)
	}
	if name, v, ok := l.Evals[0].Metric(); !ok || name != "test accuracy" || v != 0.5 {
		t.Fatalf("eval metric %q %v %v", name, v, ok)
	}

	b, _ := os.ReadFile(path)
	cut := append(append([]byte(nil), b...), []byte(`{"kind":"step","step":4,"epo`)...)
	if l, err := Read(bytes.NewReader(cut)); err != nil || len(l.Steps) != 3 {
		t.Fatalf("a log cut mid-line: %v, %d steps", err, len(l.Steps))
	}
	bad := bytes.Replace(b, []byte(`{"kind":"step","step":2`), []byte(`{"kind":"stop","step":2`), 1)
	if _, err := Read(bytes.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("an unknown kind on line 3: %v", err)
	}
	broken := bytes.Replace(b, []byte(`{"kind":"step","step":2`), []byte(`{"kind":"step","step":2,,`), 1)
	if _, err := Read(bytes.NewReader(broken)); err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Fatalf("a broken line 3: %v", err)
	}
	if _, err := Read(strings.NewReader("")); err == nil {
		t.Fatal("an empty log read")
	}
}
