package jit

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// ceIgnoreCases are cross-entropies with an ignore index: some targets
// ignored, in the thread-per-row form (7 classes) and the warp-per-row
// form (45), with [B,T] labels (a sequence model's per-token loss), with
// label smoothing, an index above the classes, and batches whose every
// target is ignored (the last two; PyTorch's loss is NaN there).
func ceIgnoreCases() []opCase {
	ce := func(name string, eps float64, ign int, logits, y opArg) opCase {
		return opCase{name: name, op: "cross_entropy", attrs: ir.Attrs{F: eps, Ints: []int{ign}}, args: []opArg{logits, y}}
	}
	return []opCase{
		ce("ign_6x7", 0, -100, f(6, 7), ignoring(2, 7, 6)),
		ce("ign_ls_6x7", 0.2, -100, f(6, 7), ignoring(3, 7, 6)),
		ce("ign_seq_3x4x5", 0, -1, f(3, 4, 5), ignoring(5, 5, 3, 4)),
		ce("ign_ls_seq_3x4x5", 0.1, -100, f(3, 4, 5), ignoring(7, 5, 3, 4)),
		ce("ign_5x45", 0, 45, f(5, 45), ignoring(2, 45, 5)),
		ce("ign_ls_5x45", 0.25, -100, f(5, 45), ignoring(1, 45, 5)),
		ce("ign_all_4x7", 0.1, -100, f(4, 7), ignoring(4, 7, 4)),
		ce("ign_all_3x45", 0, -7, f(3, 45), ignoring(3, 45, 3)),
	}
}

// allIgnored reports whether every label of case c is its ignore index.
func allIgnored(c opCase) bool { return c.args[1].ignored == elems(c.args[1].shape) }

// TestCrossEntropyIgnoreOracle compares ceIgnoreCases with PyTorch 1.13's
// F.cross_entropy(..., ignore_index=..., label_smoothing=...): the loss
// and the logits' gradient, in f64 and f32, fused and unfused, with the
// CPU forms and (f64) with the GPU forms (cpu.Options.GPUForms: the
// block's shared count of kept rows, the warp form's butterflies). Where
// every target is ignored, ngen's loss is 0 where PyTorch's is NaN, and
// both give zero gradients.
func TestCrossEntropyIgnoreOracle(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	host, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	gpu, err := cpu.New(cpu.Options{Threads: 2, GPUForms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer gpu.Close()
	cases := ceIgnoreCases()
	for _, dt := range []ir.DType{ir.F64, ir.F32} {
		m, data, shapes, err := buildOpModel(dt, cases, 0, 7)
		if err != nil {
			t.Fatal(err)
		}
		var req []oracle.Case
		for _, c := range cases {
			req = append(req, oracleCase(c, dt.String(), data, shapes[c.name]))
		}
		want, err := oracle.Run(req)
		if err != nil {
			t.Fatal(err)
		}
		// f64: both sides sum the same terms in other orders: rtol 1e-9.
		// f32: as TestOpsOracle (and the CPU form's fast_expf), rtol 1e-4,
		// atol 1e-5.
		rtol, atol := 1e-9, 1e-12
		if dt == ir.F32 {
			rtol, atol = 1e-4, 1e-5
		}
		devs := map[string]runtime.Device{"cpu": host}
		if dt == ir.F64 {
			devs["gpuforms"] = gpu
		}
		for dn, dev := range devs {
			for _, fuse := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/fuse=%v", dt, dn, fuse), func(t *testing.T) {
					s := opSession(t, dev, m, fuse, data)
					defer s.Close()
					got := runOps(t, s)
					wantLoss := 0.0
					for i, c := range cases {
						w := want[i]
						fwd, grad := w.Output.Data, w.Grads[0].Data
						if allIgnored(c) {
							// ngen's choice (dsl.CrossEntropyOptions.IgnoreIndex):
							// loss 0 where PyTorch's is 0/0; both gradients 0.
							if !math.IsNaN(fwd[0]) {
								t.Errorf("%s: torch gives %v for a fully ignored batch, expected NaN", c.name, fwd[0])
							}
							fwd = []float64{0}
							rtol, atol := 0.0, 0.0 // exact: nothing is added
							closeTo(t, c.name+" forward", got.grads[c.gName()], fwd, rtol, atol)
							closeTo(t, c.name+" grad", got.grads[c.argName(0)], grad, rtol, atol)
							continue
						}
						closeTo(t, c.name+" forward", got.grads[c.gName()], fwd, rtol, atol)
						closeTo(t, c.name+" grad", got.grads[c.argName(0)], grad, rtol, atol)
						wantLoss += fwd[0] * data.floats[c.gName()][0]
						if i == 0 {
							closeTo(t, c.name+" predict output", got.out, fwd, rtol, atol)
						}
					}
					closeTo(t, "loss", []float64{got.loss}, []float64{wantLoss}, rtol, atol)
				})
			}
		}
	}
}

// TestCrossEntropyIgnoreAllStep trains an MLP on a batch whose every
// label is ignored: the step succeeds (no refused step, no label error),
// its loss is 0 and every gradient 0, so plain SGD changes no parameter;
// then a batch with a label out of range and not the ignore index still
// fails with the op's label error.
func TestCrossEntropyIgnoreAllStep(t *testing.T) {
	dev, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows, in, classes = 6, 5, 4
	m := withIgnore(irtest.MLP(ir.F32, in, 8, classes, 0, ir.Optimizer{Kind: "sgd", LR: 0.5}), -100)
	for _, fuse := range []bool{true, false} {
		t.Run(fmt.Sprintf("fuse=%v", fuse), func(t *testing.T) {
			p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
			if err != nil {
				t.Fatal(err)
			}
			s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: rows, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			x := make([]float32, rows*in)
			for i := range x {
				x[i] = float32(i%7) - 3
			}
			before := map[string][]float64{}
			for _, n := range s.Names("param") {
				before[n] = readNamed(t, s, "param", n)
			}
			step := func(y []int32) error {
				if err := s.WriteInput("x", x, rows); err != nil {
					t.Fatal(err)
				}
				if err := s.WriteInput("y", y, rows); err != nil {
					t.Fatal(err)
				}
				return s.Run("step", rows)
			}
			if err := step([]int32{-100, -100, -100, -100, -100, -100}); err != nil {
				t.Fatalf("fully ignored batch: %v", err)
			}
			if l := readNamed(t, s, "output", "loss")[0]; l != 0 {
				t.Errorf("fully ignored batch: loss %v, want 0", l)
			}
			for _, n := range s.Names("param") {
				if g := readNamed(t, s, "grad", n); slices.ContainsFunc(g, func(v float64) bool { return v != 0 }) {
					t.Errorf("fully ignored batch: grad %s is not zero: %v", n, g[:min(4, len(g))])
				}
				if p := readNamed(t, s, "param", n); !slices.Equal(p, before[n]) {
					t.Errorf("fully ignored batch: SGD moved %s", n)
				}
			}
			// A partly ignored batch trains.
			if err := step([]int32{1, -100, 3, 0, -100, 2}); err != nil {
				t.Fatal(err)
			}
			if l := readNamed(t, s, "output", "loss")[0]; !(l > 0) {
				t.Errorf("partly ignored batch: loss %v", l)
			}
			// -1 is neither a class nor the ignore index.
			err = step([]int32{1, -100, -1, 0, -100, 2})
			if err == nil || !strings.HasPrefix(err.Error(), "cross_entropy (") || !strings.Contains(err.Error(), "label -1 at row 2 is out of range [0,4)") {
				t.Fatalf("label -1 with ignore index -100: %v", err)
			}
		})
	}
}

// withIgnore gives m's cross-entropy loss ignore index ign.
func withIgnore(m *ir.Model, ign int) *ir.Model {
	if m.Loss.Op != "cross_entropy" {
		panic("withIgnore: the loss is " + m.Loss.Op)
	}
	m.Loss.Attrs.Ints = []int{ign}
	return m
}
