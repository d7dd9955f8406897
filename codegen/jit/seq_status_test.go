package jit

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestBadTokenIDs checks that a token id out of range is a run-time error
// naming the embedding and its line, in training and prediction, distinct
// from a bad label (cross-entropy's line), and that the session stays
// usable afterwards.
func TestBadTokenIDs(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	b := irtest.New()
	ids := b.Input("ids", ir.I32, ir.S("B"), ir.D(5))
	y := b.Input("y", ir.I32, ir.S("B"))
	w := b.Param("emb", ir.F32, 1, 7, 4)
	b.Pos = ir.Pos{File: "model.go", Line: 10}
	e := b.Op("embedding", ir.Attrs{}, w, ids) // [B,5,4]
	logits := b.Op("sum", ir.Attrs{Axes: []int{1}}, e)
	b.Pos = ir.Pos{File: "model.go", Line: 20}
	loss := b.Op("cross_entropy", ir.Attrs{}, logits, y)
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	m := b.Model("tok", loss, logits, ir.Optimizer{Kind: "sgd", LR: 0.1})
	for _, fuse := range []bool{true, false} {
		p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 2, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		good := []int32{0, 1, 2, 3, 4, 5, 6, 6, 0, 1}
		bad := []int32{0, 1, 2, 3, 4, 5, 6, 9, 0, 1}
		run := func(fn string, x, lab []int32) error {
			if err := s.WriteInput("ids", x, 2); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteInput("y", lab, 2); err != nil {
				t.Fatal(err)
			}
			return s.Run(fn, 2)
		}
		if err := run("step", good, []int32{1, 2}); err != nil {
			t.Fatalf("fuse=%v: good ids: %v", fuse, err)
		}
		for _, fn := range []string{"step", "predict"} {
			err := run(fn, bad, []int32{1, 2})
			want := "embedding (model.go:10): tok: token id 9 at position 7 is out of range [0,7)"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("fuse=%v %s with id 9: error %v, want %q", fuse, fn, err, want)
			}
			// The flag is cleared: the next good call succeeds.
			if err := run(fn, good, []int32{1, 2}); err != nil {
				t.Errorf("fuse=%v %s after the error: %v", fuse, fn, err)
			}
		}
		err = run("step", good, []int32{1, 4})
		if want := "cross_entropy (model.go:20): tok: label 4 at row 1 is out of range [0,4)"; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("fuse=%v bad label: error %v, want %q", fuse, err, want)
		}
		s.Close()
	}
}
