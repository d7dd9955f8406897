package codegen

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/models/lstm"
)

// TestReportPerTimeStep: the report gives each recurrence's time steps;
// as T grows its FLOPs per time step and the kernel count stay the same
// and its bytes per time step do not grow.
func TestReportPerTimeStep(t *testing.T) {
	type perStep struct {
		kernels int
		rows    []StepRow
	}
	get := func(T int) perStep {
		m, err := lstm.LanguageModel("lm", lstm.Sizes{Vocab: 37, Emb: 11, Hidden: 13, Layers: 2, T: T, DType: lstm.Seed.DType}).Build()
		if err != nil {
			t.Fatal(err)
		}
		p, err := compiler.Compile(m, compiler.Options{Fuse: true, RefBatch: 4})
		if err != nil {
			t.Fatal(err)
		}
		r, err := MakeReport(p)
		if err != nil {
			t.Fatal(err)
		}
		var out perStep
		out.kernels = r.Kernels
		for _, s := range r.Steps {
			if s.TimeSteps != 0 {
				if s.TimeSteps != T {
					t.Fatalf("T %d: %s runs %d time steps", T, s.Kernel, s.TimeSteps)
				}
				out.rows = append(out.rows, s)
			}
		}
		var buf bytes.Buffer
		if err := r.WriteText(&buf); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(buf.String(), "per time step, all recurrences: 4 kernels' steps") {
			t.Fatalf("T %d: report lacks the per-time-step summary:\n%s", T, buf.String())
		}
		return out
	}
	a, b := get(8), get(16)
	if a.kernels != b.kernels || len(a.rows) != 4 || len(b.rows) != 4 {
		t.Fatalf("kernels %d at T 8, %d at T 16; recurrences %d and %d, want 4", a.kernels, b.kernels, len(a.rows), len(b.rows))
	}
	for i := range a.rows {
		ra, rb := a.rows[i], b.rows[i]
		// Bytes per time step fall slightly with T: the weights are read
		// once per kernel, not once per step. FLOPs per step are flat and
		// hold the recurrent product (2·4H·H per sequence).
		if rb.Bytes/16 > ra.Bytes/8 || ra.Flops/8 != rb.Flops/16 || ra.Flops/8 < 4*2*4*13*13 {
			t.Fatalf("%s per time step: %d bytes, %d FLOPs at T 8; %d, %d at T 16", ra.Kernel, ra.Bytes/8, ra.Flops/8, rb.Bytes/16, rb.Flops/16)
		}
	}
}
