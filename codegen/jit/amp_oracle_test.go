package jit

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// ampMLPModel is mlpOracleModel's MLP without dropout, under
// dsl.AMP{Type: dsl.BF16}.
func ampMLPModel(opt ir.Optimizer) (*ir.Model, []string) {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(mlpWidths[0]))
	y := b.Input("y", ir.I32, ir.S("B"))
	h := x
	var layers []string
	for i, n := range mlpWidths[1:] {
		name := fmt.Sprintf("fc%d", i+1)
		layers = append(layers, name)
		h = b.Linear(name, h, n)
		if i < len(mlpWidths)-2 {
			h = b.Unary("relu", h)
		}
	}
	m := b.Model("amp_mlp", b.Binary("cross_entropy", h, y), h, opt)
	m.Precision = &ir.Precision{Type: ir.BF16, Pos: b.Pos}
	return m, layers
}

// TestAMPMLPOracle trains the MLP under bf16 mixed precision for four
// steps of SGD with momentum (Adam's step is about lr times the
// gradient's sign, which a bf16 gradient near zero flips: a poor probe
// of precision), fused and with -fuse=none, and compares them with each
// other (bit for bit: a bf16 value is rounded where it is computed, so
// fusion changes no arithmetic) and with PyTorch 1.13 training the same
// MLP under torch.autocast(device_type="cpu", dtype=torch.bfloat16).
func TestAMPMLPOracle(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows, steps, seed = 16, 4, 11
	x, xs, y := mlpBatch(rows, 31, 32)
	opt := ir.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}
	m, layers := ampMLPModel(opt)
	train := func(fuse bool) ampRun {
		r := ampTrain(t, dev, m, fuse, nil, x, y, rows, steps, seed)
		for n, g := range r.grads {
			// A bias's gradient is a bf16 reduction's result, widened;
			// a Linear weight's is its GEMM's f32 result
			// (compiler/f32_weight_grads.go).
			if !strings.HasSuffix(n, ".weight") {
				bf16Exact(t, fmt.Sprintf("fuse=%v grad %s", fuse, n), g)
			}
		}
		// The logits are the last bf16 add, widened for the caller.
		bf16Exact(t, fmt.Sprintf("fuse=%v predict output", fuse), r.predict)
		return r
	}
	fused, unfused := train(true), train(false)
	// The same arithmetic op for op: bit for bit.
	sameRuns(t, fused, unfused)

	req := mlpRequest{DType: "f32", Layers: layers, Params: fused.init,
		X: tensorJSON{Shape: []int{rows, mlpWidths[0]}, Data: xs}, Y: y, Steps: steps, Opt: opt, AMP: "bf16"}
	want, err := runTorchMLP(req)
	if err != nil {
		t.Fatal(err)
	}
	// bf16 keeps 8 significant bits (relative rounding 2^-9 ≈ 2e-3);
	// PyTorch's addmm rounds the product and the bias once where ngen
	// rounds the GEMM and then the add, and the libraries sum in other
	// orders, so single activations differ by a bf16 ulp: the f32 loss
	// within 1%.
	closeTo(t, "loss vs torch.autocast", fused.loss, want.Loss, 1e-2, 0)
	for n := range fused.params {
		// bf16 gradients, a few roundings deep: 5% of the largest.
		closeTo(t, "grad "+n+" vs torch.autocast", fused.grads[n], want.Grads[n], 0, 0.05*maxAbs(want.Grads[n]))
		// The updates are lr times momentum sums of such gradients,
		// against f32 master weights that move by up to about 0.1
		// here: within 5% of the largest update.
		closeTo(t, "param "+n+" vs torch.autocast", fused.params[n], want.Params[n], 0, 0.05*moved(fused.init[n].Data, want.Params[n]))
	}
}

// ampRun is one training run: each step's loss, every gradient of step
// 1, the parameters and state after the last step, the initial
// parameters, and the predict function's output after the last step.
type ampRun struct {
	loss          []float64
	grads         map[string][]float64
	params, state map[string][]float64
	init          map[string]tensorJSON
	predict       []float64
}

// ampTrain compiles m, fused or with -fuse=none, starts a session
// (seed), writes init's parameters when init is not nil, takes steps
// training steps on the batch (x, y) of rows rows and runs predict on
// it: the shared body of the mixed-precision oracle tests.
func ampTrain(t *testing.T, dev runtime.Device, m *ir.Model, fuse bool, init map[string][]float64, x []float32, y []int32, rows, steps int, seed uint64) ampRun {
	t.Helper()
	prog, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Session(dev, prog, runtime.SessionOptions{MaxBatch: rows, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if init != nil {
		writeParams(t, s, init)
	}
	r := ampRun{params: map[string][]float64{}, state: map[string][]float64{}, init: initParams(t, s)}
	r.loss, r.grads = mlpSteps(t, s, x, y, rows, steps, nil)
	if err := s.Run("predict", rows); err != nil {
		t.Fatal(err)
	}
	r.predict = readNamed(t, s, "output", "output")
	for _, n := range s.Names("param") {
		r.params[n] = readNamed(t, s, "param", n)
	}
	for _, n := range s.Names("state") {
		r.state[n] = readNamed(t, s, "state", n)
	}
	return r
}

// sameRuns fails unless a and b agree bit for bit: losses, gradients,
// parameters, state and predictions.
func sameRuns(t *testing.T, a, b ampRun) {
	t.Helper()
	closeTo(t, "loss fused vs -fuse=none", a.loss, b.loss, 0, 0)
	for n := range a.params {
		closeTo(t, "grad "+n+" fused vs -fuse=none", a.grads[n], b.grads[n], 0, 0)
		closeTo(t, "param "+n+" fused vs -fuse=none", a.params[n], b.params[n], 0, 0)
	}
	for n := range a.state {
		closeTo(t, "state "+n+" fused vs -fuse=none", a.state[n], b.state[n], 0, 0)
	}
	closeTo(t, "predict fused vs -fuse=none", a.predict, b.predict, 0, 0)
}

// moved is how far the reference moved a parameter from init at most.
func moved(init, want []float64) float64 {
	var d float64
	for i, v := range want {
		d = max(d, math.Abs(v-init[i]))
	}
	return d
}

func maxAbs(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, math.Abs(x))
	}
	return m
}

// bf16Exact fails unless every value is a bfloat16 (the low 16 bits of
// its float32 are zero): the policy stored it in bf16.
func bf16Exact(t *testing.T, what string, xs []float64) {
	t.Helper()
	for i, x := range xs {
		if math.Float32bits(float32(x))&0xffff != 0 {
			t.Errorf("%s[%d] = %g is not a bfloat16", what, i, x)
			return
		}
	}
}
