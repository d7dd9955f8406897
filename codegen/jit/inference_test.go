package jit

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// Inference never touches training state (issue 27): a Predict that
// succeeds or fails, in training or eval mode, leaves the checkpoint
// byte for byte as it was: parameters, optimizer and declared state (batch
// norm's running statistics), the step count and the dropout counter.
// Before, every Predict advanced ngen.dropout_counter, a failed one too,
// and a training-mode Predict moved the running statistics.

// inferenceModel: token ids through an embedding (a checked op: an id out
// of range fails), plus a float input h, batch norm over a [B, 2, 2, 2]
// view, dropout, a linear head.
func inferenceModel() *ir.Model {
	b := irtest.New()
	ids := b.Input("ids", ir.I32, ir.S("B"), ir.D(8))
	h := b.Input("h", ir.F32, ir.S("B"), ir.D(8))
	y := b.Input("y", ir.I32, ir.S("B"))
	table := b.Param("emb.weight", ir.F32, 0.5, 5, 1)
	e := b.Op("reshape", ir.Attrs{Shape: ir.Shape{ir.S("B"), ir.D(8)}}, b.Op("embedding", ir.Attrs{}, table, ids))
	x := b.Op("reshape", ir.Attrs{Shape: ir.Shape{ir.S("B"), ir.D(2), ir.D(2), ir.D(2)}}, b.Binary("add", e, h))
	gamma := b.Source("param", ir.Param, "bn.weight", ir.F32, ir.Static(2), "const:1")
	beta := b.Source("param", ir.Param, "bn.bias", ir.F32, ir.Static(2), "const:0")
	rm := b.Source("state", ir.State, "bn.running_mean", ir.F32, ir.Static(2), "const:0")
	rv := b.Source("state", ir.State, "bn.running_var", ir.F32, ir.Static(2), "const:1")
	n, nm, nv := ops.BatchNorm2d(b.Builder, x, gamma, beta, rm, rv, 0.1, 1e-5)
	b.F.Updates = append(b.F.Updates, ir.Update{State: rm, New: nm}, ir.Update{State: rv, New: nv})
	d := b.Op("dropout", ir.Attrs{F: 0.3, I: 1}, b.Op("reshape", ir.Attrs{Shape: ir.Shape{ir.S("B"), ir.D(8)}}, n))
	logits := b.Linear("fc", d, 3)
	return b.Model("infer", b.Binary("cross_entropy", logits, y), logits, irtest.Adam)
}

func saved(t *testing.T, s *runtime.Session) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.Save(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestInferenceTouchesNothing(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	ids := []int32{1, 2, 3, 4, 0, 1, 2, 3, 4, 4, 3, 2, 1, 0, 1, 2}
	h := []float32{0.5, -1, 2, 0.25, 1, -0.5, 0, 3, -2, 1, 0.5, 0.5, -1, 2, 1, 0}
	for _, fuse := range []bool{true, false} {
		p, err := compiler.Compile(inferenceModel(), compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 2, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		write := func(ids []int32, h []float32) {
			if err := s.WriteInput("ids", ids, 2); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteInput("h", h, 2); err != nil {
				t.Fatal(err)
			}
		}
		write(ids, h)
		if err := s.WriteInput("y", []int32{0, 2}, 2); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ { // running statistics, moments, counters non-zero
			if err := s.Run("step", 2); err != nil {
				t.Fatal(err)
			}
		}
		before := saved(t, s)
		if !strings.Contains(string(before), `"ngen.dropout_counter":"2"`) {
			t.Fatalf("fuse=%v: two steps, checkpoint metadata %q", fuse, before[8:200])
		}
		bad := append([]int32(nil), ids...)
		bad[3] = 5 // vocabulary 5
		nan := append([]float32(nil), h...)
		nan[6] = float32(math.NaN())
		for _, train := range []bool{true, false} {
			s.SetTrain(train)
			fn := "predict"
			if !train && hasFunc(s, "predict_eval") {
				fn = "predict_eval"
			}
			write(ids, h)
			if err := s.Run(fn, 2); err != nil {
				t.Fatalf("fuse=%v %s: %v", fuse, fn, err)
			}
			write(bad, h)
			if err := s.Run(fn, 2); err == nil || !strings.Contains(err.Error(), "token id 5") {
				t.Fatalf("fuse=%v %s: an id out of range: %v", fuse, fn, err)
			}
			write(ids, nan)
			if err := s.Run(fn, 2); err == nil || !strings.Contains(err.Error(), `input "h"`) || !strings.Contains(err.Error(), "element 6 is NaN") {
				t.Fatalf("fuse=%v %s: a NaN in h: %v", fuse, fn, err)
			}
			if after := saved(t, s); !bytes.Equal(after, before) {
				t.Fatalf("fuse=%v %s (train %v): the checkpoint changed", fuse, fn, train)
			}
		}
		// The NaN is refused only while it is there, and Step still
		// refuses it through its loss.
		s.SetTrain(true)
		write(ids, h)
		if err := s.Run("predict", 2); err != nil {
			t.Fatalf("fuse=%v: predict after the NaN was overwritten: %v", fuse, err)
		}
		write(ids, nan)
		if err := s.Run("step", 2); err == nil {
			t.Fatalf("fuse=%v: a step with a NaN in h succeeded", fuse)
		}
		if after := saved(t, s); !bytes.Equal(after, before) {
			t.Fatalf("fuse=%v: the failed step changed the checkpoint", fuse)
		}
		s.Close()
	}
}

func hasFunc(s *runtime.Session, name string) bool {
	for _, f := range s.Plan().Funcs {
		if f.Name == name {
			return true
		}
	}
	return false
}

// TestPendingMicroBatchesAndCheckpoints (issue 27): with
// AccumulationSteps 2, Step(b1), Load(ck), Step(b2) applied b1's gradient
// to the loaded weights, and Step(b1), Save gave a checkpoint that did not
// continue as the saved session. Save now refuses while micro-batches are
// pending, and Load drops them.
func TestPendingMicroBatchesAndCheckpoints(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	p, err := compiler.Compile(irtest.MLP(ir.F64, accIn, 8, accClasses, 0, irtest.Adam), compiler.Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	a := accSession(t, dev, p, accB, 2)
	b := accSession(t, dev, p, accB, 2)
	step := func(s *runtime.Session, seed uint64) {
		t.Helper()
		if err := s.Run("step", feed(t, s, accData(accB, accIn, accClasses, seed))); err != nil {
			t.Fatal(err)
		}
	}
	step(a, 1)
	step(a, 2) // one update
	ck := saved(t, a)
	step(a, 3)
	if a.Pending() != 1 {
		t.Fatalf("pending %d, want 1", a.Pending())
	}
	var buf bytes.Buffer
	if err := a.Save(&buf); err == nil || !strings.Contains(err.Error(), "1 micro-batch(es) of gradient accumulation pending") || buf.Len() != 0 {
		t.Fatalf("Save with a pending micro-batch: %v (%d bytes written)", err, buf.Len())
	}
	if err := a.Load(bytes.NewReader(ck)); err != nil {
		t.Fatal(err)
	}
	if a.Pending() != 0 {
		t.Fatalf("pending %d after Load, want 0", a.Pending())
	}
	if err := b.Load(bytes.NewReader(ck)); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*runtime.Session{a, b} {
		step(s, 4)
		step(s, 5)
	}
	sameParams(t, "after Load dropped the pending micro-batch", params(t, a), params(t, b))
	if !bytes.Equal(saved(t, a), saved(t, b)) {
		t.Fatal("the two sessions' checkpoints differ")
	}
}
