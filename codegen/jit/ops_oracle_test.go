package jit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// The op tests check every differentiable op a user can reach against
// PyTorch (ops_oracle_test.go) and against finite differences
// (gradcheck_test.go). Each op application is a case; the cases of a group
// share one model, and so one g++ compilation, in which case i contributes
// sum(op_i(params...) * G_i) to the loss. G_i is a parameter too, so the
// one "step" yields both the op's vector-Jacobian products (the gradients
// of its operands, with G_i as grad_output) and its forward values (the
// gradient of G_i).

// Domains for generated operand data.
const (
	anySign   = iota // normal
	positive         // [0.5, 2]: log, sqrt, powc, divisors
	awayFrom0        // ±[0.2, 1.5]: relu, abs (no kink within reach of eps)
	distinct         // distinct values 0.05 apart, shuffled: max (no ties)
	offset           // 30 + normal: rows whose mean dwarfs their spread (LayerNorm)
	fanIn            // normal / √(last dimension): weights as initialised, so products stay O(1)
)

type opArg struct {
	shape   []int
	classes int // > 0: i32 labels in [0, classes)
	ignored int // of those labels, how many are the case's ignore index (ops.CEIgnore), at random places
	domain  int
}

type opCase struct {
	name  string // also the prefix of its parameter names
	op    string
	attrs ir.Attrs
	args  []opArg
}

func (c opCase) argName(j int) string {
	if c.args[j].classes > 0 {
		return fmt.Sprintf("%s.y%d", c.name, j)
	}
	return fmt.Sprintf("%s.x%d", c.name, j)
}

func (c opCase) gName() string { return c.name + ".g" }

func f(shape ...int) opArg         { return opArg{shape: shape} }
func fd(d int, s ...int) opArg     { return opArg{shape: s, domain: d} }
func labels(n int, s ...int) opArg { return opArg{shape: s, classes: n} }

// ignoring is labels(n, s...) with k of them the case's ignore index.
func ignoring(k, n int, s ...int) opArg { return opArg{shape: s, classes: n, ignored: k} }

func unaryCases(op string, d int, attrs ir.Attrs) []opCase {
	return []opCase{
		{name: op + "_3x5", op: op, attrs: attrs, args: []opArg{fd(d, 3, 5)}},
		{name: op + "_2x3x7", op: op, attrs: attrs, args: []opArg{fd(d, 2, 3, 7)}},
	}
}

// opGroups lists the cases, grouped so that each group is one compilation.
func opGroups() map[string][]opCase {
	var unary []opCase
	for _, u := range []struct {
		op     string
		domain int
		attrs  ir.Attrs
	}{
		{"neg", anySign, ir.Attrs{}},
		{"copy", anySign, ir.Attrs{}},
		{"exp", anySign, ir.Attrs{}},
		{"log", positive, ir.Attrs{}},
		{"sqrt", positive, ir.Attrs{}},
		{"square", anySign, ir.Attrs{}},
		{"abs", awayFrom0, ir.Attrs{}},
		{"relu", awayFrom0, ir.Attrs{}},
		{"sigmoid", anySign, ir.Attrs{}},
		{"tanh", anySign, ir.Attrs{}},
		{"gelu", anySign, ir.Attrs{}},
		{"scale", anySign, ir.Attrs{F: -1.7}},
		{"addc", anySign, ir.Attrs{F: 0.3}},
		{"powc", positive, ir.Attrs{F: 2.5}},
	} {
		unary = append(unary, unaryCases(u.op, u.domain, u.attrs)...)
	}
	unary = append(unary, opCase{name: "powc_neg_3x5", op: "powc", attrs: ir.Attrs{F: -1.5}, args: []opArg{fd(positive, 3, 5)}})

	var binary []opCase
	for _, op := range []string{"add", "sub", "mul", "div"} {
		d := anySign
		if op == "div" {
			d = positive
		}
		binary = append(binary,
			opCase{name: op + "_3x5", op: op, args: []opArg{f(3, 5), fd(d, 3, 5)}},
			opCase{name: op + "_3x1x5_4x5", op: op, args: []opArg{f(3, 1, 5), fd(d, 4, 5)}},
			opCase{name: op + "_5_2x3x5", op: op, args: []opArg{f(5), fd(d, 2, 3, 5)}},
			opCase{name: op + "_2x1x7_1x3x1", op: op, args: []opArg{f(2, 1, 7), fd(d, 1, 3, 1)}},
		)
	}

	var reduce []opCase
	for _, op := range []string{"sum", "mean", "max"} {
		d := anySign
		if op == "max" {
			d = distinct
		}
		for _, r := range []struct {
			tag   string
			shape []int
			axes  []int
			keep  bool
		}{
			{"3x5_ax0", []int{3, 5}, []int{0}, false},
			{"3x5_ax0_keep", []int{3, 5}, []int{0}, true},
			{"3x5_ax1", []int{3, 5}, []int{1}, false},
			{"2x3x7_last", []int{2, 3, 7}, []int{2}, false},
			{"2x3x7_last_keep", []int{2, 3, 7}, []int{-1}, true},
			{"2x3x7_mid", []int{2, 3, 7}, []int{1}, false},
			{"2x3x7_mid_keep", []int{2, 3, 7}, []int{1}, true},
			{"2x3x7_ax02", []int{2, 3, 7}, []int{0, 2}, false},
			{"2x3x7_ax02_keep", []int{2, 3, 7}, []int{0, 2}, true},
			{"2x3x7_ax01", []int{2, 3, 7}, []int{0, 1}, false},
			{"2x3x7_all", []int{2, 3, 7}, nil, false},
			{"2x3x7_all_keep", []int{2, 3, 7}, nil, true},
			// The kept inner axis in groups of four outputs per thread.
			{"5x8_ax0", []int{5, 8}, []int{0}, false},
			{"2x3x8_ax01_keep", []int{2, 3, 8}, []int{0, 1}, true},
			// Row loops over a contiguous reduced axis of 32 or more,
			// whole groups of four and a ragged last group.
			{"3x2x40_ax02", []int{3, 2, 40}, []int{0, 2}, false},
			{"3x2x37_ax02_keep", []int{3, 2, 37}, []int{0, 2}, true},
			// GPU shapes: strips of eight kept outputs with the rows split
			// over the block (37 rows: ragged), and few outputs split over
			// gridDim.y slices finished by the last block (two-phase).
			{"37x24_ax0", []int{37, 24}, []int{0}, false},
			{"2x37x16_ax01_keep", []int{2, 37, 16}, []int{0, 1}, true},
			{"3x4x300_ax02", []int{3, 4, 300}, []int{0, 2}, false},
			{"5x700_ax1", []int{5, 700}, []int{1}, false},
		} {
			reduce = append(reduce, opCase{name: op + "_" + r.tag, op: op,
				attrs: ir.Attrs{Axes: r.axes, KeepDim: r.keep}, args: []opArg{fd(d, r.shape...)}})
		}
	}

	matmul := []opCase{
		{name: "matmul_nn", op: "matmul", args: []opArg{f(3, 4), f(4, 5)}},
		{name: "matmul_tn", op: "matmul", attrs: ir.Attrs{TransA: true}, args: []opArg{f(4, 3), f(4, 5)}},
		{name: "matmul_nt", op: "matmul", attrs: ir.Attrs{TransB: true}, args: []opArg{f(3, 4), f(5, 4)}},
		{name: "matmul_tt", op: "matmul", attrs: ir.Attrs{TransA: true, TransB: true}, args: []opArg{f(4, 3), f(5, 4)}},
		{name: "matmul_batched", op: "matmul", args: []opArg{f(2, 3, 4), f(2, 4, 5)}},
		{name: "matmul_batched_tt", op: "matmul", attrs: ir.Attrs{TransA: true, TransB: true}, args: []opArg{f(2, 4, 3), f(2, 5, 4)}},
		{name: "matmul_batched_shared_b", op: "matmul", args: []opArg{f(2, 3, 4), f(4, 5)}},
		{name: "matmul_batched_shared_a", op: "matmul", attrs: ir.Attrs{TransB: true}, args: []opArg{f(3, 4), f(2, 5, 4)}},
	}

	views := []opCase{
		{name: "reshape_2x3x7_6x7", op: "reshape", attrs: ir.Attrs{Shape: ir.Static(6, 7)}, args: []opArg{f(2, 3, 7)}},
		{name: "reshape_3x5_15", op: "reshape", attrs: ir.Attrs{Shape: ir.Static(15)}, args: []opArg{f(3, 5)}},
		{name: "broadcast_3x1x5_3x4x5", op: "broadcast", attrs: ir.Attrs{Shape: ir.Static(3, 4, 5)}, args: []opArg{f(3, 1, 5)}},
		{name: "broadcast_5_2x3x5", op: "broadcast", attrs: ir.Attrs{Shape: ir.Static(2, 3, 5)}, args: []opArg{f(5)}},
		{name: "broadcast_2x1_2x7", op: "broadcast", attrs: ir.Attrs{Shape: ir.Static(2, 7)}, args: []opArg{f(2, 1)}},
		{name: "cross_entropy_4x7", op: "cross_entropy", args: []opArg{f(4, 7), labels(7, 4)}},
		{name: "cross_entropy_2x3x5", op: "cross_entropy", args: []opArg{f(2, 3, 5), labels(5, 2, 3)}},
		// 45 classes: a warp per row (ceThreadClasses), a partial last lane pass.
		{name: "cross_entropy_3x45", op: "cross_entropy", args: []opArg{f(3, 45), labels(45, 3)}},
		// label_smoothing, in the thread-per-row and warp-per-row forms.
		{name: "cross_entropy_ls_4x7", op: "cross_entropy", attrs: ir.Attrs{F: 0.1}, args: []opArg{f(4, 7), labels(7, 4)}},
		{name: "cross_entropy_ls_3x45", op: "cross_entropy", attrs: ir.Attrs{F: 0.25}, args: []opArg{f(3, 45), labels(45, 3)}},
		// ignore_index (ceIgnoreCases has more, a fully ignored batch too).
		{name: "cross_entropy_ign_4x7", op: "cross_entropy", attrs: ir.Attrs{Ints: []int{-100}}, args: []opArg{f(4, 7), ignoring(2, 7, 4)}},
		{name: "cross_entropy_ign_ls_2x3x5", op: "cross_entropy", attrs: ir.Attrs{F: 0.1, Ints: []int{-1}}, args: []opArg{f(2, 3, 5), ignoring(3, 5, 2, 3)}},
		{name: "cross_entropy_ign_ls_3x45", op: "cross_entropy", attrs: ir.Attrs{F: 0.25, Ints: []int{45}}, args: []opArg{f(3, 45), ignoring(1, 45, 3)}},
	}
	return map[string][]opCase{"unary": unary, "binary": binary, "reduce": reduce, "matmul": matmul, "views": views, "vision": visionCases(), "seq": seqCases(), "recur": recurCases(), "norm": normCases(), "attention": attentionCases()}
}

// opData is the operand, label and grad_output data of every case.
type opData struct {
	floats map[string][]float64 // parameter name → values
	labels map[string][]int32
}

func elems(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func genValues(rng *rand.Rand, n, domain int, dt ir.DType) []float64 {
	v := make([]float64, n)
	switch domain {
	case distinct:
		for i, p := range rng.Perm(n) {
			v[i] = 0.05*float64(p) - 0.025*float64(n)
		}
	default:
		for i := range v {
			switch domain {
			case positive:
				v[i] = 0.5 + 1.5*rng.Float64()
			case offset:
				v[i] = 30 + rng.NormFloat64()
			case awayFrom0:
				v[i] = 0.2 + 1.3*rng.Float64()
				if rng.IntN(2) == 0 {
					v[i] = -v[i]
				}
			default:
				v[i] = rng.NormFloat64()
			}
		}
	}
	if dt == ir.F32 {
		for i := range v {
			v[i] = float64(float32(v[i]))
		}
	}
	return v
}

// buildOpModel declares one model for a group of cases and fills in random
// data for each case. The model's predict output is case outCase's result.
func buildOpModel(dt ir.DType, cases []opCase, outCase int, seed uint64) (*ir.Model, opData, map[string][]int, error) {
	b := irtest.New()
	rng := rand.New(rand.NewPCG(seed, 99))
	data := opData{floats: map[string][]float64{}, labels: map[string][]int32{}}
	outShapes := map[string][]int{}
	var loss, out *ir.Value
	for i, c := range cases {
		var args []*ir.Value
		for j, a := range c.args {
			if a.classes > 0 {
				dims := make([]ir.Dim, len(a.shape))
				for k, d := range a.shape {
					dims[k] = ir.D(d)
				}
				args = append(args, b.Input(c.argName(j), ir.I32, dims...))
				y := make([]int32, elems(a.shape))
				for k := range y {
					y[k] = int32(rng.IntN(a.classes))
				}
				if ign, ok := ops.CEIgnore(c.attrs); ok {
					for _, k := range rng.Perm(len(y))[:a.ignored] {
						y[k] = int32(ign)
					}
				}
				data.labels[c.argName(j)] = y
				continue
			}
			args = append(args, b.Param(c.argName(j), dt, 1, a.shape...))
			vals := genValues(rng, elems(a.shape), a.domain, dt)
			if a.domain == fanIn {
				for k := range vals {
					vals[k] /= math.Sqrt(float64(a.shape[len(a.shape)-1]))
					if dt == ir.F32 {
						vals[k] = float64(float32(vals[k]))
					}
				}
			}
			data.floats[c.argName(j)] = vals
		}
		v := buildCase(b, c, args)
		if b.Err != nil {
			return nil, data, nil, fmt.Errorf("case %s: %v", c.name, b.Err)
		}
		var shape []int
		for _, d := range v.Shape {
			if d.Sym != "" {
				return nil, data, nil, fmt.Errorf("case %s: symbolic result shape %s", c.name, v.Shape)
			}
			shape = append(shape, d.N)
		}
		outShapes[c.name] = shape
		g := b.Param(c.gName(), dt, 1, shape...)
		data.floats[c.gName()] = genValues(rng, elems(shape), anySign, dt)
		term := b.Binary("mul", v, g)
		if len(shape) > 0 {
			term = b.Op("sum", ir.Attrs{}, term)
		}
		if loss == nil {
			loss = term
		} else {
			loss = b.Binary("add", loss, term)
		}
		if i == outCase {
			out = v
		}
	}
	if b.Err != nil {
		return nil, data, nil, b.Err
	}
	sgd0 := ir.Optimizer{Kind: "sgd", LR: 0} // p - 0*grad: parameters stay exactly put
	return b.Model("ops", loss, out, sgd0), data, outShapes, nil
}

// opResults is what one "step" and one "predict" of an op model produce.
type opResults struct {
	loss  float64
	out   []float64
	grads map[string][]float64
}

// opSession compiles m and loads data into a fresh session.
func opSession(t *testing.T, dev runtime.Device, m *ir.Model, fuse bool, data opData) *runtime.Session {
	t.Helper()
	p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
	if err != nil {
		t.Fatalf("compile (fuse=%v): %v", fuse, err)
	}
	// No value has a symbolic dim, so the batch size is immaterial.
	s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 1, Seed: 1})
	if err != nil {
		t.Fatalf("session (fuse=%v): %v", fuse, err)
	}
	for name, v := range data.floats {
		i, err := s.Lookup("param", name)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.WriteFloats(i, v); err != nil {
			t.Fatal(err)
		}
	}
	writeLabels(t, s, data)
	return s
}

func writeLabels(t *testing.T, s *runtime.Session, data opData) {
	t.Helper()
	for name, y := range data.labels {
		if err := s.WriteInput(name, y, 1); err != nil {
			t.Fatal(err)
		}
	}
}

func readNamed(t *testing.T, s *runtime.Session, role, name string) []float64 {
	t.Helper()
	i, err := s.Lookup(role, name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.ReadFloats(i)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func runOps(t *testing.T, s *runtime.Session) opResults {
	t.Helper()
	if err := s.Run("step", 1); err != nil {
		t.Fatal(err)
	}
	r := opResults{loss: readNamed(t, s, "output", "loss")[0], grads: map[string][]float64{}}
	for _, name := range s.Names("grad") {
		r.grads[name] = readNamed(t, s, "grad", name)
	}
	if err := s.Run("predict", 1); err != nil {
		t.Fatal(err)
	}
	r.out = readNamed(t, s, "output", "output")
	return r
}

func oracleAttrs(a ir.Attrs) map[string]any {
	m := map[string]any{}
	if a.F != 0 {
		m["f"] = a.F
	}
	if a.Axes != nil {
		m["axes"] = a.Axes
	}
	if a.KeepDim {
		m["keepdim"] = true
	}
	if a.TransA {
		m["transa"] = true
	}
	if a.TransB {
		m["transb"] = true
	}
	if a.Ints != nil {
		m["ints"] = a.Ints
	}
	if a.Perm != nil {
		m["perm"] = a.Perm
	}
	if a.Str != "" {
		m["str"] = a.Str
	}
	if a.I != 0 {
		m["i"] = a.I
	}
	if a.Shape != nil {
		var s []int
		for _, d := range a.Shape {
			s = append(s, d.N)
		}
		m["shape"] = s
	}
	return m
}

func oracleCase(c opCase, dt string, data opData, outShape []int) oracle.Case {
	oc := oracle.Case{Op: c.op, Attrs: oracleAttrs(c.attrs), DType: dt}
	for j, a := range c.args {
		if a.classes > 0 {
			y := data.labels[c.argName(j)]
			v := make([]float64, len(y))
			for k := range y {
				v[k] = float64(y[k])
			}
			oc.Inputs = append(oc.Inputs, oracle.Tensor{Shape: a.shape, DType: "i32", Data: v})
			continue
		}
		oc.Inputs = append(oc.Inputs, oracle.Tensor{Shape: a.shape, Data: data.floats[c.argName(j)]})
	}
	oc.GradOutput = &oracle.Tensor{Shape: outShape, Data: data.floats[c.gName()]}
	return oc
}

// closeTo reports, through t, the values of got that differ from want by
// more than atol + rtol*|want|, and whether all are within.
func closeTo(t *testing.T, what string, got, want []float64, rtol, atol float64) bool {
	t.Helper()
	if msg := mismatch(got, want, rtol, atol); msg != "" {
		t.Errorf("%s: %s", what, msg)
		return false
	}
	return true
}

// mismatch describes how got differs from want, or returns "".
func mismatch(got, want []float64, rtol, atol float64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d values, want %d", len(got), len(want))
	}
	bad, worst, at := 0, 0.0, -1
	for i := range want {
		d := math.Abs(got[i] - want[i])
		if !(d <= atol+rtol*math.Abs(want[i])) { // NaN fails too
			bad++
			if e := d / (atol + rtol*math.Abs(want[i])); at < 0 || e > worst || math.IsNaN(e) {
				worst, at = e, i
			}
		}
	}
	if bad == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d values off; worst at [%d]: got %.9g, want %.9g (got %.6g..., want %.6g...)",
		bad, len(want), at, got[at], want[at], got[:min(4, len(got))], want[:min(4, len(want))])
}

func groupNames(groups map[string][]opCase) []string {
	var names []string
	for n := range groups {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// TestOpsOracle runs every case in f32, fused and unfused, and compares the
// forward values, the loss, every operand gradient and the predict output
// with PyTorch 1.13 on the same data. The unfused runs launch every kernel
// with the GPU's block (cpu.Options.GPUBlocks), the fused ones with the CPU
// backend's one-thread blocks for reductions, so both shapes meet the oracle.
func TestOpsOracle(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	gpuShapes, err := cpu.New(cpu.Options{GPUBlocks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer gpuShapes.Close()
	groups := opGroups()
	type built struct {
		m      *ir.Model
		data   opData
		shapes map[string][]int
		first  int // index of the group's first case in the oracle request
	}
	var req []oracle.Case
	models := map[string]built{}
	for gi, name := range groupNames(groups) {
		cases := groups[name]
		m, data, shapes, err := buildOpModel(ir.F32, cases, len(cases)-1, uint64(gi+1))
		if err != nil {
			t.Fatalf("group %s: %v", name, err)
		}
		models[name] = built{m, data, shapes, len(req)}
		for _, c := range cases {
			req = append(req, oracleCase(c, "f32", data, shapes[c.name]))
		}
	}
	want, err := oracle.Run(req)
	if err != nil {
		t.Fatal(err)
	}
	// f32 throughout; both sides round each op once but may order sums
	// differently (reductions, GEMM, the cross-entropy row sums): rtol 1e-4,
	// and atol 1e-5 for values that cancel to near zero.
	const rtol, atol = 1e-4, 1e-5
	for _, name := range groupNames(groups) {
		cases, bm := groups[name], models[name]
		for _, fuse := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fuse=%v", name, fuse), func(t *testing.T) {
				d := dev
				if !fuse {
					d = gpuShapes
				}
				s := opSession(t, d, bm.m, fuse, bm.data)
				defer s.Close()
				got := runOps(t, s)
				wantLoss, scale := 0.0, 0.0
				for i, c := range cases {
					w := want[bm.first+i]
					if !slices.Equal(w.Output.Shape, bm.shapes[c.name]) {
						t.Errorf("%s: ngen result shape %v, torch %v", c.name, bm.shapes[c.name], w.Output.Shape)
						continue
					}
					closeTo(t, c.name+" forward", got.grads[c.gName()], w.Output.Data, rtol, atol)
					for j := range c.args {
						if c.args[j].classes > 0 {
							continue
						}
						closeTo(t, c.name+" grad "+c.argName(j), got.grads[c.argName(j)], w.Grads[j].Data, rtol, atol)
					}
					for k, o := range w.Output.Data {
						g := bm.data.floats[c.gName()][k]
						wantLoss += o * g
						scale += math.Abs(o * g)
					}
					if i == len(cases)-1 {
						closeTo(t, c.name+" predict output", got.out, w.Output.Data, rtol, atol)
					}
				}
				// The loss adds up every case's terms: rtol relative to the
				// sum of their magnitudes, since the terms may cancel.
				if math.Abs(got.loss-wantLoss) > atol+rtol*scale {
					t.Errorf("loss %.9g, want %.9g (sum of |terms| %.3g)", got.loss, wantLoss, scale)
				}
			})
		}
	}
}

// TestSumGradSeed checks the simplest loss, sum(x): every gradient is
// exactly 1. The gradient of a full reduction reshapes the autodiff seed,
// a fill that kernels inline and so never store.
func TestSumGradSeed(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, fuse := range []bool{true, false} {
		b := irtest.New()
		x := b.Param("x", ir.F32, 1, 3)
		m := b.Model("sumseed", b.Op("sum", ir.Attrs{}, x), x, ir.Optimizer{Kind: "sgd", LR: 0})
		p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 1, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Run("step", 1); err != nil {
			t.Fatal(err)
		}
		// Exact: the gradient is the broadcast seed, with no arithmetic.
		closeTo(t, fmt.Sprintf("fuse=%v d sum(x)/dx", fuse), readNamed(t, s, "grad", "x"), []float64{1, 1, 1}, 0, 0)
		s.Close()
	}
}

// TestReduceScalar reduces a rank-0 value (sum, mean and max of sum(x)),
// which is the identity, as in PyTorch: its kernel has no axis at all (it
// indexed the innermost one and panicked). Every gradient is exactly 1.
func TestReduceScalar(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, op := range []string{"sum", "mean", "max"} {
		for _, fuse := range []bool{true, false} {
			b := irtest.New()
			x := b.Param("x", ir.F32, 1, 3)
			m := b.Model("reducescalar", b.Op(op, ir.Attrs{}, b.Op("sum", ir.Attrs{}, x)), x, ir.Optimizer{Kind: "sgd", LR: 0})
			p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
			if err != nil {
				t.Fatal(err)
			}
			s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 1, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Run("step", 1); err != nil {
				t.Fatal(err)
			}
			closeTo(t, fmt.Sprintf("fuse=%v d %s(sum(x))/dx", fuse, op), readNamed(t, s, "grad", "x"), []float64{1, 1, 1}, 0, 0)
			s.Close()
		}
	}
}

// TestMaxGradTies checks max's gradient where a reduced slice ties: as
// torch.amax, the tied elements share the gradient evenly (opGroups keeps
// max's data distinct, since finite differences have no answer at a tie).
// compiler/fuzzgen found the tie at a fully masked attention row, whose
// outputs all equal the projection's bias (regression fuzz_69_min).
func TestMaxGradTies(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	x0 := []float64{1, 1, 0, 1, -2, 5, 5, -2}
	for _, c := range []struct {
		name string
		axes []int
		want []float64
	}{
		{"rows", []int{1}, []float64{1. / 3, 1. / 3, 0, 1. / 3, 0, 0.5, 0.5, 0}},
		{"all", nil, []float64{0, 0, 0, 0, 0, 0.5, 0.5, 0}},
	} {
		for _, fuse := range []bool{true, false} {
			b := irtest.New()
			x := b.Param("x", ir.F64, 1, 2, 4)
			m := b.Model("maxties", b.Op("sum", ir.Attrs{}, b.Op("max", ir.Attrs{Axes: c.axes}, x)), x, ir.Optimizer{Kind: "sgd", LR: 0})
			p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
			if err != nil {
				t.Fatal(err)
			}
			s, err := Session(dev, p, runtime.SessionOptions{MaxBatch: 1, Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			pi, err := s.Lookup("param", "x")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.WriteFloats(pi, x0); err != nil {
				t.Fatal(err)
			}
			if err := s.Run("step", 1); err != nil {
				t.Fatal(err)
			}
			// Exact: 1 divided by the number of ties, in double.
			closeTo(t, fmt.Sprintf("%s fuse=%v d sum(max(x))/dx", c.name, fuse), readNamed(t, s, "grad", "x"), c.want, 0, 0)
			s.Close()
		}
	}
}

// gradcheckExempt lists the differentiable ops that have no case of their
// own in opGroups, with the reason. Every other op with a gradient rule
// must have at least one case, so a new op cannot skip the oracle and the
// gradient check.
var gradcheckExempt = map[string]string{
	"dropout": "random: checked against PyTorch with the Go Philox masks in TestMLPOracle and TestDropoutMaskMatchesKernels",
	"cast":    "a 16-bit type's rounding (AMP): the op groups run in f32 and f64; TestAMPMLPOracle checks casts forward and back against torch.autocast (every bf16 value exactly a bf16), runtime/cpu/emu's half tests the conversions",
}

// TestOpCoverage checks that every op with a gradient rule is exercised by
// the per-op oracle and gradient check.
func TestOpCoverage(t *testing.T) {
	covered := map[string]bool{}
	for _, cases := range opGroups() {
		for _, c := range cases {
			covered[c.op] = true
			for _, op := range composites[c.op].uses {
				covered[op] = true
			}
		}
	}
	for _, name := range ops.Names() {
		d := ops.Lookup(name)
		if d.Grad == nil || covered[name] {
			continue
		}
		if _, ok := gradcheckExempt[name]; !ok {
			t.Errorf("op %s has a gradient rule but no case in opGroups (add one, or an exemption with the reason)", name)
		}
	}
}
