package jit

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/schedule"
)

// philox is Philox4x32-10 as codegen/preamble.cuh's ngen_philox4 keys it:
// counter (ctr lo, ctr hi, stream, step lo), key (seed lo, seed hi ^ step
// hi); it returns the four output words.
func philox(seed, step uint64, stream uint32, ctr uint64) [4]uint32 {
	c0, c1, c2, c3 := uint32(ctr), uint32(ctr>>32), stream, uint32(step)
	k0, k1 := uint32(seed), uint32(seed>>32)^uint32(step>>32)
	for r := 0; r < 10; r++ {
		p0 := uint64(0xD2511F53) * uint64(c0)
		p1 := uint64(0xCD9E8D57) * uint64(c2)
		c0, c1, c2, c3 = uint32(p1>>32)^c1^k0, uint32(p1), uint32(p0>>32)^c3^k1, uint32(p0)
		k0 += 0x9E3779B9
		k1 += 0xBB67AE85
	}
	return [4]uint32{c0, c1, c2, c3}
}

// keep is ngen_keep: element idx takes word idx&3 of counter idx>>2, its
// top 24 bits as a float in [0, 1), compared in float32 with the keep
// probability 1-p.
func keep(seed, step uint64, stream uint32, idx uint64, p float64) bool {
	return float32(philox(seed, step, stream, idx>>2)[idx&3]>>8)*5.9604644775390625e-08 < float32(1-p)
}

// dropoutMask is the 0/1 mask of n elements for one dropout op in the Run
// whose call counter is step.
func dropoutMask(seed, step uint64, stream uint32, n int, p float64) []float64 {
	m := make([]float64, n)
	for i := range m {
		if keep(seed, step, stream, uint64(i), p) {
			m[i] = 1
		}
	}
	return m
}

// TestPhiloxKnownAnswers checks the Go Philox against Random123's
// known-answer vectors (kat_vectors, philox4x32 10), all four words.
func TestPhiloxKnownAnswers(t *testing.T) {
	if got, want := philox(0, 0, 0, 0), [4]uint32{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}; got != want {
		t.Errorf("philox(zero key, zero counter) = %#x, want %#x", got, want)
	}
	// Counter and key all ones: step lo 0xffffffff, step hi 0 so that key
	// word 1 (seed hi ^ step hi) is 0xffffffff.
	if got, want := philox(math.MaxUint64, 0xffffffff, 0xffffffff, math.MaxUint64), [4]uint32{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}; got != want {
		t.Errorf("philox(all ones) = %#x, want %#x", got, want)
	}
}

// TestDropoutMaskMatchesKernels runs dropout over ones in training mode
// through predict and compares every element with the Go mask, before
// and after an optimizer step (the step, counted from 1, is part of the
// key) and with a seed with high bits set.
func TestDropoutMaskMatchesKernels(t *testing.T) {
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows, cols, p, stream, seed = 6, 37, 0.3, 5, 0x1234_5678_9abc
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(cols))
	d := b.Op("dropout", ir.Attrs{F: p, I: stream}, x)
	w := b.Param("w", ir.F32, 1, 1, cols)
	m := b.Model("dropmask", b.Op("sum", ir.Attrs{}, b.Binary("mul", d, w)), d, ir.Optimizer{Kind: "sgd", LR: 0})
	for _, fuse := range []bool{true, false} {
		prog, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Session(dev, prog, runtime.SessionOptions{MaxBatch: rows, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		ones := make([]float32, rows*cols)
		for i := range ones {
			ones[i] = 1
		}
		s.SetTrain(true)
		for call := uint64(1); call <= 2; call++ {
			if err := s.WriteInput("x", ones, rows); err != nil {
				t.Fatal(err)
			}
			if err := s.Run("predict", rows); err != nil {
				t.Fatal(err)
			}
			got := readNamed(t, s, "output", "output")
			want := dropoutMask(seed, call, stream, rows*cols, p)
			if err := s.Run("step", rows); err != nil { // SGD at lr 0
				t.Fatal(err)
			}
			kept := 0
			for i := range want {
				want[i] *= float64(float32(1 / (1 - p))) // the kernels scale by the f32 literal
				if want[i] != 0 {
					kept++
				}
			}
			// Exact: ones times a constant, or zero.
			closeTo(t, fmt.Sprintf("fuse=%v call %d dropout(ones)", fuse, call), got, want, 0, 0)
			if f := float64(kept) / float64(len(want)); math.Abs(f-(1-p)) > 0.1 {
				t.Errorf("fuse=%v call %d: kept %.2f of elements, want about %.2f", fuse, call, f, 1-p)
			}
		}
		s.Close()
	}
}

// mlpOracleModel is in → 23 ReLU Dropout → 17 ReLU Dropout → 10 with
// cross-entropy, the seed MLP at odd, small widths. Dropout streams are 1
// and 2.
var mlpWidths = []int{37, 23, 17, 10}

const mlpDropout = 0.2

func mlpOracleModel(dt ir.DType, opt ir.Optimizer) (*ir.Model, []string) {
	b := irtest.New()
	x := b.Input("x", dt, ir.S("B"), ir.D(mlpWidths[0]))
	y := b.Input("y", ir.I32, ir.S("B"))
	h := x
	var layers []string
	for i, n := range mlpWidths[1:] {
		name := fmt.Sprintf("fc%d", i+1)
		layers = append(layers, name)
		h = b.Linear(name, h, n)
		if i < len(mlpWidths)-2 {
			h = b.Op("dropout", ir.Attrs{F: mlpDropout, I: i + 1}, b.Unary("relu", h))
		}
	}
	return b.Model("mlp_oracle", b.Binary("cross_entropy", h, y), h, opt), layers
}

type tensorJSON struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

type mlpRequest struct {
	DType  string                `json:"dtype"`
	Layers []string              `json:"layers"`
	Params map[string]tensorJSON `json:"params"`
	X      tensorJSON            `json:"x"`
	Y      []int32               `json:"y"`
	P      float64               `json:"p"`
	Masks  [][][]float64         `json:"masks"`
	Steps  int                   `json:"steps"`
	Opt    ir.Optimizer          `json:"optimizer"`
	AMP    string                `json:"amp,omitempty"` // "bf16": torch.autocast; "f16": emulated
	// Scaler, when set, emulates GradScaler (torch_mlp.py).
	Scaler *scalerJSON `json:"scaler,omitempty"`
	// ClipNorms, when set, is the max norm of each step (0: no clipping
	// at that step), after the run-time max norm of a session that
	// changes it between steps.
	ClipNorms []float64 `json:"clip_norms,omitempty"`
}

type mlpResult struct {
	Loss    []float64            `json:"loss"`
	Scales  []float64            `json:"scales"`
	Skipped []bool               `json:"skipped"`
	Grads   map[string][]float64 `json:"grads"`
	Params  map[string][]float64 `json:"params"`
}

func runTorchMLP(req mlpRequest) (*mlpResult, error) {
	var res mlpResult
	return &res, oracle.RunScript("torch_mlp.py", req, &res)
}

// mlpBatch is a batch of rows for the MLP of mlpWidths from the PCG
// seeded (s1, s2): normal images (as f32, and the same values as f64 for
// the oracle) and labels.
func mlpBatch(rows int, s1, s2 uint64) ([]float32, []float64, []int32) {
	rng := rand.New(rand.NewPCG(s1, s2))
	x := make([]float32, rows*mlpWidths[0])
	xs := make([]float64, len(x))
	for i := range x {
		x[i] = float32(rng.NormFloat64())
		xs[i] = float64(x[i])
	}
	y := make([]int32, rows)
	for i := range y {
		y[i] = int32(rng.IntN(mlpWidths[len(mlpWidths)-1]))
	}
	return x, xs, y
}

// TestMLPOracle trains the MLP for three steps of each optimizer from the
// session's initial weights, with dropout masks computed by the Go Philox,
// and compares the loss of each step, every gradient of step 1 and every
// parameter after step 3 with PyTorch doing the same (torch.optim.Adam,
// AdamW, and SGD with momentum, dampening, Nesterov and weight decay).
func TestMLPOracle(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const rows, seed = 7, 11
	x, xs, y := mlpBatch(rows, 21, 22)
	type optCase struct {
		name  string
		opt   ir.Optimizer
		fuse  []bool
		steps int // 3 when 0
		f64   bool
		wd    *float64 // a run-time weight decay (SetWeightDecay), when set
	}
	// Parameter groups (torch.optim param_groups): AdamW without decay on
	// the biases, the last layer at 2.5 times the rate with betas of its
	// own; SGD with a group of its own momentum, rate and decay.
	adamwGroups := ir.Optimizer{Kind: "adamw", LR: 2e-3, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.05, Groups: []ir.ParamGroup{
		{Names: []string{"*.bias"}, LRScale: 1, OwnDecay: true, Beta1: 0.8, Beta2: 0.99},
		{Names: []string{"fc3.*"}, LRScale: 2.5, WeightDecay: 0.05, Beta1: 0.5, Beta2: 0.9},
	}}
	adamGroups := ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Groups: []ir.ParamGroup{
		{Names: []string{"fc1.weight", "fc2.weight"}, LRScale: 0.5, WeightDecay: 0.2, OwnDecay: true, Beta1: 0.9, Beta2: 0.999},
	}}
	sgdGroups := ir.Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.9, WeightDecay: 1e-3, Groups: []ir.ParamGroup{
		{Names: []string{"*.bias"}, LRScale: 0.5, WeightDecay: 0.01, OwnDecay: true, Momentum: 0.5},
	}}
	wd := func(x float64) *float64 { return &x }
	// Cases whose max norm is set at run time (Session.SetClipNorm) on a
	// model compiled with clipping off (ClipNormOff, dsl.ClipGradNorm(+Inf)):
	// the PyTorch run clips at that norm. Without an entry here such a
	// model does not clip, and PyTorch does not either.
	runtimeClip := map[string]float64{"adam_runtime_clip_norm": 0.1, "sgd_momentum_runtime_clip_norm": 0.1}
	// Cases that set the max norm before every step: clipping on, off
	// (+Inf: the session skips the grad-norm kernel and the update scales
	// by 1) and on again, as clip_grad_norm_ called on some steps only.
	off := math.Inf(1)
	clipSteps := map[string][]float64{"adam_clip_toggled": {0.1, off, off, 0.05, off, 0.1}}
	clipOff := func(o ir.Optimizer) ir.Optimizer {
		o.ClipNormOff = true
		return o
	}
	sched := func(o ir.Optimizer, s schedule.Schedule) ir.Optimizer {
		o.Schedule = &s
		return o
	}
	for _, oc := range []optCase{
		{"adam", irtest.Adam, []bool{true, false}, 0, false, nil},
		{"adamw", ir.Optimizer{Kind: "adamw", LR: 2e-3, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.05}, []bool{true}, 0, false, nil},
		{"sgd_nesterov_wd", ir.Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-3}, []bool{true}, 0, false, nil},
		{"sgd_momentum_dampening", ir.Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.8, Dampening: 0.3}, []bool{true}, 0, false, nil},
		{"sgd", ir.Optimizer{Kind: "sgd", LR: 0.1}, []bool{true}, 0, false, nil},
		// Schedules (runtime/schedule) against torch.optim.lr_scheduler
		// stepped after each optimizer step, over steps that cross the
		// warm-up's end, every one-cycle phase, the StepLR drops (the
		// warm-up cosine up to its total: past it PyTorch's cosine rises
		// again, ngen's stays at the floor).
		{"adam_warmup_cosine", sched(irtest.Adam, schedule.Schedule{Kind: "warmup_cosine", Iters: 3, Total: 10, Min: 1e-4, StartFactor: 1.0 / 3}), []bool{true, false}, 11, false, nil},
		{"adam_warmup_cosine", sched(irtest.Adam, schedule.Schedule{Kind: "warmup_cosine", Iters: 3, Total: 10, Min: 1e-4, StartFactor: 1.0 / 3}), []bool{true}, 11, true, nil},
		{"adamw_onecycle", sched(ir.Optimizer{Kind: "adamw", LR: 2e-3, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, WeightDecay: 0.05},
			schedule.Schedule{Kind: "onecycle", Total: 12, PctStart: 0.3, DivFactor: 25, FinalDivFactor: 1e4}), []bool{true}, 12, false, nil},
		{"sgd_momentum_step", sched(ir.Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.9}, schedule.Schedule{Kind: "step", StepSize: 2, Gamma: 0.5}), []bool{true}, 7, false, nil},
		// clip_grad_value_ before each step, at a bound that clamps a
		// good share of the gradients (they are O(1e-2) here).
		{"adam_clip_value", ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipValue: 0.01}, []bool{true, false}, 4, false, nil},
		{"adam_clip_value", ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipValue: 0.01}, []bool{true}, 4, true, nil},
		{"sgd_momentum_clip_value", ir.Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.9, ClipValue: 0.005}, []bool{true}, 4, false, nil},
		// clip_grad_norm_ before each step, at a max norm below the
		// gradients' (about 0.4 here), so every step scales them.
		{"adam_clip_norm", ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipNorm: 0.1}, []bool{true, false}, 4, false, nil},
		{"adam_clip_norm", ir.Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipNorm: 0.1}, []bool{true}, 4, true, nil},
		{"sgd_momentum_clip_norm", ir.Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.9, ClipNorm: 0.1}, []bool{true}, 4, false, nil},
		{"adam_runtime_clip_norm", clipOff(irtest.Adam), []bool{true, false}, 4, false, nil},
		{"adam_runtime_clip_norm", clipOff(irtest.Adam), []bool{true}, 4, true, nil},
		{"sgd_momentum_runtime_clip_norm", clipOff(ir.Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.9}), []bool{true}, 4, false, nil},
		{"adam_clip_norm_off", clipOff(irtest.Adam), []bool{true}, 3, false, nil},
		{"adam_clip_toggled", clipOff(irtest.Adam), []bool{true, false}, 6, false, nil},
		{"adam_clip_toggled", clipOff(irtest.Adam), []bool{true}, 6, true, nil},
		{"adamw_groups", adamwGroups, []bool{true, false}, 4, false, nil},
		// Groups under schedules that do not scale: each group runs the
		// schedule from its own rate, the cosine floor absolute (eta_min),
		// OneCycleLR peaking at each group's rate (max_lr per group).
		{"adamw_groups_warmup_cosine_min", sched(adamwGroups, schedule.Schedule{Kind: "warmup_cosine", Iters: 2, Total: 6, Min: 1e-3, StartFactor: 0.5}), []bool{true}, 7, true, nil},
		{"adamw_groups_onecycle", sched(adamwGroups, schedule.Schedule{Kind: "onecycle", Total: 6, PctStart: 0.3, DivFactor: 25, FinalDivFactor: 1e4}), []bool{true}, 6, true, nil},
		{"adamw_groups", adamwGroups, []bool{true}, 4, true, nil},
		{"adamw_groups_runtime_decay", adamwGroups, []bool{true}, 4, true, wd(0.3)},
		{"adam_groups_runtime_decay", adamGroups, []bool{true, false}, 4, false, wd(0.05)},
		{"adam_groups", adamGroups, []bool{true}, 4, true, nil},
		{"sgd_groups", sgdGroups, []bool{true}, 4, false, nil},
		{"sgd_groups_runtime_decay", sgdGroups, []bool{true}, 4, true, wd(0.02)},
		// The run-time decay of a model without groups, and of one
		// declared without decay.
		{"adam_runtime_decay", irtest.Adam, []bool{true}, 3, true, wd(0.1)},
		{"sgd_runtime_decay", ir.Optimizer{Kind: "sgd", LR: 0.05, Momentum: 0.9}, []bool{true}, 3, false, wd(0.01)},
	} {
		steps := oc.steps
		if steps == 0 {
			steps = 3
		}
		dt, dts := ir.F32, "f32"
		if oc.f64 {
			dt, dts = ir.F64, "f64"
		}
		m, layers := mlpOracleModel(dt, oc.opt)
		for _, fuse := range oc.fuse {
			t.Run(fmt.Sprintf("%s/%s/fuse=%v", oc.name, dts, fuse), func(t *testing.T) {
				prog, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
				if err != nil {
					t.Fatal(err)
				}
				s, err := Session(dev, prog, runtime.SessionOptions{MaxBatch: rows, Seed: seed})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				req := mlpRequest{DType: dts, Layers: layers, Params: map[string]tensorJSON{},
					X: tensorJSON{Shape: []int{rows, mlpWidths[0]}, Data: xs}, Y: y, P: mlpDropout, Steps: steps,
					Opt: oc.opt}
				req.Opt.Groups = slices.Clone(oc.opt.Groups)
				for i, g := range s.Plan().Optimizer.Groups {
					req.Opt.Groups[i].Params = g.Params
				}
				if c, ok := runtimeClip[oc.name]; ok {
					if err := s.SetClipNorm(c); err != nil {
						t.Fatal(err)
					}
					req.Opt.ClipNorm = c
				}
				if oc.wd != nil {
					if err := s.SetWeightDecay(*oc.wd); err != nil {
						t.Fatal(err)
					}
					req.Opt.WeightDecay = *oc.wd
				}
				req.Params = initParams(t, s)
				var xin any = x
				if oc.f64 {
					xin = xs
				}
				losses, grads := mlpSteps(t, s, xin, y, rows, steps, func(step int) {
					if seq, ok := clipSteps[oc.name]; ok {
						if err := s.SetClipNorm(seq[step-1]); err != nil {
							t.Fatal(err)
						}
						req.ClipNorms = append(req.ClipNorms, 0)
						if !math.IsInf(seq[step-1], 1) {
							req.ClipNorms[step-1] = seq[step-1]
						}
					}
					var masks [][]float64
					for i, w := range mlpWidths[1 : len(mlpWidths)-1] {
						masks = append(masks, dropoutMask(seed, uint64(step), uint32(i+1), rows*w, mlpDropout))
					}
					req.Masks = append(req.Masks, masks)
				})
				want, err := runTorchMLP(req)
				if err != nil {
					t.Fatal(err)
				}
				// f32 GEMMs and row sums in a different order from torch's:
				// rtol 1e-4. atol 1e-6 for the loss and gradients near zero
				// (their terms are O(1e-2) at these widths).
				rtol, atol := 1e-4, 1e-6
				if oc.f64 {
					// The same sums in another order, in f64 (Adam's
					// division by sqrt(v)+eps amplifies rounding a little).
					rtol, atol = 1e-9, 1e-12
				}
				closeTo(t, "loss per step", losses, want.Loss, rtol, atol)
				for n, g := range want.Grads {
					closeTo(t, "step 1 grad "+n, grads[n], g, rtol, atol)
				}
				// Adam moves each parameter by about lr = 1e-3 a step whatever
				// the gradient's size, so a gradient that differs by rounding
				// moves it slightly differently: atol 1e-6 (1e-3 of one step).
				for n, p := range want.Params {
					closeTo(t, fmt.Sprintf("param after %d steps %s", steps, n), readNamed(t, s, "param", n), p, rtol, atol)
				}
			})
		}
	}
}

// initParams reads s's parameters as an oracle request takes them.
func initParams(t *testing.T, s *runtime.Session) map[string]tensorJSON {
	t.Helper()
	out := map[string]tensorJSON{}
	for _, n := range s.Names("param") {
		var shape []int
		if err := json.Unmarshal([]byte(shapeJSON(s.Plan(), n)), &shape); err != nil {
			t.Fatal(err)
		}
		out[n] = tensorJSON{Shape: shape, Data: readNamed(t, s, "param", n)}
	}
	return out
}

// mlpSteps takes steps training steps of s on the batch x, y of rows
// rows, calling before(step) first when it is set, and returns each
// step's loss and every gradient of step 1.
func mlpSteps(t *testing.T, s *runtime.Session, x any, y []int32, rows, steps int, before func(step int)) ([]float64, map[string][]float64) {
	t.Helper()
	var losses []float64
	grads := map[string][]float64{}
	for step := 1; step <= steps; step++ {
		if before != nil {
			before(step)
		}
		if err := s.WriteInput("x", x, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.WriteInput("y", y, rows); err != nil {
			t.Fatal(err)
		}
		if err := s.Run("step", rows); err != nil {
			t.Fatal(err)
		}
		losses = append(losses, readNamed(t, s, "output", "loss")[0])
		if step == 1 {
			for _, n := range s.Names("grad") {
				grads[n] = readNamed(t, s, "grad", n)
			}
		}
	}
	return losses, grads
}

// shapeJSON turns a buffer's written type, like f32[23,37], into a JSON
// list.
func shapeJSON(p *runtime.Plan, name string) string {
	for _, b := range p.Buffers {
		if b.Role == "param" && b.Name == name {
			s := b.Shape
			for i := range s {
				if s[i] == '[' {
					return s[i:]
				}
			}
		}
	}
	return "null"
}
