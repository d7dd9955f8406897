package convnet_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/generated/convnet"
	"github.com/ngen-ml/ngen/generated/convnet_bn"
	"github.com/ngen-ml/ngen/generated/convnet_bn_unfused"
	"github.com/ngen-ml/ngen/generated/convnet_unfused"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// End-to-end tests of the generated ConvNet packages, built by cgo from the
// committed generated code.

// model is what every generated package offers.
type model interface {
	Step(x []float32, y []int32) (float32, error)
	Predict(x []float32) ([]float32, error)
	Train()
	Eval()
	Params() []string
	Param(name string) ([]float32, error)
	Grad(name string) ([]float32, error)
	SetParam(name string, v []float32) error
	Session() *runtime.Session
	Close() error
}

type variant struct {
	name           string
	bn             bool
	fused, unfused func(dev runtime.Device, batch int, seed uint64) (model, error)
}

var variants = []variant{
	{"convnet", false,
		func(d runtime.Device, b int, s uint64) (model, error) {
			return convnet.New(d, convnet.Options{Batch: b, Seed: s})
		},
		func(d runtime.Device, b int, s uint64) (model, error) {
			return convnet_unfused.New(d, convnet_unfused.Options{Batch: b, Seed: s})
		}},
	{"convnet_bn", true,
		func(d runtime.Device, b int, s uint64) (model, error) {
			return convnet_bn.New(d, convnet_bn.Options{Batch: b, Seed: s})
		},
		func(d runtime.Device, b int, s uint64) (model, error) {
			return convnet_bn_unfused.New(d, convnet_bn_unfused.Options{Batch: b, Seed: s})
		}},
}

func device(t *testing.T) runtime.Device {
	return deviceOpts(t, cpu.Options{})
}

func deviceOpts(t *testing.T, opts cpu.Options) runtime.Device {
	dev, err := cpu.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

func batch(n int, seed uint64) ([]float32, []int32) {
	rng := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, n*784)
	y := make([]int32, n)
	for i := range x {
		x[i] = rng.Float32()
	}
	for i := range y {
		y[i] = int32(rng.IntN(10))
	}
	return x, y
}

func close(a, b, rtol, atol float64) bool { return math.Abs(a-b) <= atol+rtol*math.Abs(b) }

// state reads a state buffer (a running statistic) by name.
func state(t *testing.T, m model, name string) []float64 {
	t.Helper()
	s := m.Session()
	i, err := s.Lookup("state", name)
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.ReadFloats(i)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestFusedMatchesUnfused(t *testing.T) {
	dev := device(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			a, err := v.fused(dev, 8, 5)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := v.unfused(dev, 8, 5)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			// Per-row atomicAdd of the loss in any order: rtol 1e-6.
			matchSteps(t, a, b, v.bn, 3, 1e-6)
			fused, unfused := launches(a.Session().Plan()), launches(b.Session().Plan())
			if fused >= unfused {
				t.Fatalf("fused plan launches %d kernels, unfused %d", fused, unfused)
			}
			t.Logf("kernels per step: fused %d, unfused %d", fused, unfused)
		})
	}
}

// matchSteps trains a and b for steps steps on one batch and compares the
// losses (to rtol lossTol), gradients, parameters and running statistics.
func matchSteps(t *testing.T, a, b model, bn bool, steps int, lossTol float64) {
	t.Helper()
	x, y := batch(8, 2)
	for step := 1; step <= steps; step++ {
		la, err := a.Step(x, y)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := b.Step(x, y)
		if err != nil {
			t.Fatal(err)
		}
		if !close(float64(la), float64(lb), lossTol, 0) {
			t.Fatalf("step %d: loss %v vs %v", step, la, lb)
		}
		for _, name := range a.Params() {
			ga, _ := a.Grad(name)
			gb, _ := b.Grad(name)
			pa, _ := a.Param(name)
			pb, _ := b.Param(name)
			// The same arithmetic, but sums over the batch (bias and
			// weight gradients, batch statistics) are split
			// differently between fused and unfused kernels, and
			// Adam divides by sqrt(v) of gradients near zero:
			// rtol 1e-4, atol 1e-6. A gradient at that noise level
			// (a convolution's bias before batch norm, whose true
			// gradient is zero) gets Adam steps of any size up to
			// lr in either direction, so such a parameter may differ
			// by up to 2·lr per step taken.
			for i := range ga {
				if !close(float64(ga[i]), float64(gb[i]), 1e-4, 1e-6) {
					t.Fatalf("step %d: grad %s[%d] %v vs %v", step, name, i, ga[i], gb[i])
				}
				patol := 1e-6
				if math.Abs(float64(ga[i])) < 1e-6 && math.Abs(float64(gb[i])) < 1e-6 {
					patol = 2 * 1e-3 * float64(step)
				}
				if !close(float64(pa[i]), float64(pb[i]), 1e-4, patol) {
					t.Fatalf("step %d: param %s[%d] %v vs %v", step, name, i, pa[i], pb[i])
				}
			}
		}
	}
	if bn {
		for _, n := range []string{"bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"} {
			sa, sb := state(t, a, n), state(t, b, n)
			// The running mean moves with the convolution's bias,
			// whose noise-level gradient (above) may move it by up to
			// 2·lr per step: momentum 0.1 of such steps. The
			// variance does not depend on the bias.
			atol := 1e-7
			if strings.HasSuffix(n, "mean") {
				atol = 0.1 * 2 * 1e-3 * float64(steps)
			}
			for i := range sa {
				if !close(sa[i], sb[i], 1e-5, atol) {
					t.Fatalf("%s[%d] %v vs %v", n, i, sa[i], sb[i])
				}
			}
		}
	}
}

func launches(p *runtime.Plan) int {
	n := 0
	for _, f := range p.Funcs {
		if f.Name == "step" {
			for _, s := range f.Steps {
				if s.Kind == runtime.LaunchStep {
					n++
				}
			}
		}
	}
	return n
}

// TestBatchNormModes checks the train/eval switch: training steps move
// the running statistics, eval-mode passes leave them alone and normalise
// with them, and a checkpoint carries them.
// The reductions run with one-thread blocks on the CPU
// (KernelInfo.SoloBlocks); the GPU's 256-thread blocks must give the same
// training steps.
func TestGPUBlocks(t *testing.T) {
	solo, gpu := device(t), deviceOpts(t, cpu.Options{GPUBlocks: true})
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			a, err := v.fused(solo, 8, 5)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := v.fused(gpu, 8, 5)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			// The batch statistics are summed in another order, and
			// batch norm divides by their spread: rtol 2e-5. With batch
			// norm, one step: the convolutions' biases before it have
			// gradients of rounding noise, whose signs differ between the
			// two orders, so Adam's first step moves them by ±lr, and the
			// next steps' rounding differs more than the tolerances allow
			// (fused and unfused kernels share their reduction orders).
			steps := 3
			if v.bn {
				steps = 1
			}
			matchSteps(t, a, b, v.bn, steps, 2e-5)
		})
	}
}

func TestBatchNormModes(t *testing.T) {
	dev := device(t)
	m, err := convnet_bn.New(dev, convnet_bn.Options{Batch: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, y := batch(8, 3)
	if rm := state(t, m, "bn1.running_mean"); rm[0] != 0 {
		t.Fatalf("running_mean starts at %v, want 0", rm[0])
	}
	if rv := state(t, m, "bn1.running_var"); rv[0] != 1 {
		t.Fatalf("running_var starts at %v, want 1", rv[0])
	}
	if _, err := m.Step(x, y); err != nil {
		t.Fatal(err)
	}
	rm := state(t, m, "bn1.running_mean")
	if rm[0] == 0 {
		t.Fatal("a training step left running_mean at 0")
	}
	m.Eval()
	p1, err := m.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Step(x, y); err != nil { // eval-mode step: gradients, no statistics update
		t.Fatal(err)
	}
	if got := state(t, m, "bn1.running_mean"); got[0] != rm[0] {
		t.Fatalf("eval-mode step moved running_mean %v → %v", rm[0], got[0])
	}
	var buf bytes.Buffer
	if err := m.Save(&buf); err != nil {
		t.Fatal(err)
	}
	p2, _ := m.Predict(x)
	// Predict in eval mode runs predict_eval, the predict function
	// specialised to eval mode; the general one, run with the train flag
	// off, must agree.
	if got := runPredict(t, m.Session(), "predict", 8); !allClose(got, p2, 1e-6) {
		t.Fatalf("eval-mode predict and predict_eval differ: %v vs %v", got[:4], p2[:4])
	}
	m2, err := convnet_bn.New(dev, convnet_bn.Options{Batch: 8, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if err := m2.Load(&buf); err != nil {
		t.Fatal(err)
	}
	m2.Eval()
	p3, _ := m2.Predict(x)
	for i := range p2 {
		if p2[i] != p3[i] {
			t.Fatalf("eval logits after Load differ at %d: %v vs %v", i, p2[i], p3[i])
		}
	}
	m.Train()
	pt, _ := m.Predict(x)
	same := true
	for i := range pt {
		if pt[i] != p2[i] {
			same = false
		}
	}
	if same || len(p1) != 80 {
		t.Fatal("train-mode Predict equals eval-mode Predict: batch statistics not used")
	}
}

// TestConvNetOracle runs three Adam steps of each ConvNet from ngen's
// initial weights in ngen and in PyTorch 1.13 (float32, one thread) and
// compares the loss of every step, every gradient of the first step, every
// parameter and running statistic after the third, and eval-mode logits.
func TestConvNetOracle(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dev := device(t)
	_, file, _, _ := goruntime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "testdata", "oracle", "torch_convnet.py")
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			m, err := v.fused(dev, 6, 11)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			x, y := batch(6, 4)
			req := map[string]any{"bn": v.bn, "x": x, "y": y, "steps": 3, "params": map[string][]float32{}, "state": map[string][]float64{}}
			for _, n := range m.Params() {
				p, _ := m.Param(n)
				req["params"].(map[string][]float32)[n] = p
			}
			if v.bn {
				for _, n := range []string{"bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"} {
					req["state"].(map[string][]float64)[n] = state(t, m, n)
				}
			}
			in, _ := json.Marshal(req)
			cmd := exec.Command("/usr/bin/python3", script)
			cmd.Stdin = bytes.NewReader(in)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("torch_convnet.py: %v\n%s", err, stderr.Bytes())
			}
			var want struct {
				Loss       []float64            `json:"loss"`
				Grads      map[string][]float64 `json:"grads"`
				Params     map[string][]float64 `json:"params"`
				EvalLogits []float64            `json:"eval_logits"`
			}
			if err := json.Unmarshal(out, &want); err != nil {
				t.Fatal(err)
			}
			// f32 throughout; the two sides sum convolutions and batch
			// statistics in different orders (im2col GEMM vs PyTorch's
			// convolution): rtol 1e-4 on losses and parameters; gradients
			// with atol 1e-5 relative to their largest element.
			check := func(what string, got []float32, want []float64, rtol, atol float64) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
				}
				for i := range got {
					if !close(float64(got[i]), want[i], rtol, atol) {
						t.Fatalf("%s[%d] = %v, want %v", what, i, got[i], want[i])
					}
				}
			}
			maxAbs := func(v []float64) float64 {
				m := 0.0
				for _, x := range v {
					m = math.Max(m, math.Abs(x))
				}
				return m
			}
			m.Train()
			var g1 map[string][]float32
			for step := 0; step < 3; step++ {
				l, err := m.Step(x, y)
				if err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("loss of step %d", step+1), []float32{l}, want.Loss[step:step+1], 1e-4, 0)
				if step == 0 {
					g1 = map[string][]float32{}
					for _, n := range m.Params() {
						g, _ := m.Grad(n)
						g1[n] = g
						// atol: 1e-4 of the tensor's largest gradient, and
						// 1e-6 for gradients that are zero in exact
						// arithmetic (a conv bias before batch norm).
						check("grad "+n, g, want.Grads[n], 1e-3, math.Max(1e-6, 1e-4*maxAbs(want.Grads[n])))
					}
				}
			}
			gmax := 0.0
			for _, g := range want.Grads {
				gmax = math.Max(gmax, maxAbs(g))
			}
			for _, n := range m.Params() {
				p, _ := m.Param(n)
				// Adam moves every parameter by about lr·sign(gradient),
				// whatever the gradient's size, so where the first
				// gradient is rounding noise (below 1e-3 of the largest
				// gradient of any parameter: e.g. a conv bias before batch
				// norm, zero in exact arithmetic) the two sides may step
				// in opposite directions: up to 2·3·lr apart.
				big := 1e-3 * gmax
				for i := range p {
					atol := 1e-5
					if math.Abs(want.Grads[n][i]) < big || math.Abs(float64(g1[n][i])) < big {
						atol = 6e-3
					}
					if !close(float64(p[i]), want.Params[n][i], 1e-4, atol) {
						t.Fatalf("param %s[%d] = %v, want %v (first gradient %v, PyTorch's %v)", n, i, p[i], want.Params[n][i], g1[n][i], want.Grads[n][i])
					}
				}
			}
			if v.bn {
				for _, n := range []string{"bn1.running_mean", "bn1.running_var", "bn2.running_mean", "bn2.running_var"} {
					got := state(t, m, n)
					g32 := make([]float32, len(got))
					for i := range got {
						g32[i] = float32(got[i])
					}
					// A running mean carries the conv bias, which Adam moves
					// by noise (above): momentum·3 steps·6e-3 apart at most.
					// Variances do not see a shift.
					atol := 1e-6
					if strings.HasSuffix(n, "running_mean") {
						atol = 2e-3
					}
					check(n, g32, want.Params[n], 1e-4, atol)
				}
			}
			m.Eval()
			logits, err := m.Predict(x)
			if err != nil {
				t.Fatal(err)
			}
			// The parameters and running means that Adam moved by noise
			// (above) shift the logits too: atol 5e-3 with batch norm.
			atol := 1e-4
			if v.bn {
				atol = 5e-3
			}
			check("eval logits", logits, want.EvalLogits, 1e-3, atol)
		})
	}
}

// runPredict runs plan function fn on the batch already written and reads
// its output.
func runPredict(t *testing.T, s *runtime.Session, fn string, rows int) []float32 {
	t.Helper()
	if err := s.Run(fn, rows); err != nil {
		t.Fatal(err)
	}
	for _, f := range s.Plan().Funcs {
		if f.Name == fn {
			out := make([]float32, s.Elems(f.Outputs[0].Buf))
			if err := s.Read(f.Outputs[0].Buf, out); err != nil {
				t.Fatal(err)
			}
			return out
		}
	}
	t.Fatalf("plan has no function %s", fn)
	return nil
}

func allClose(a, b []float32, tol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !close(float64(a[i]), float64(b[i]), tol, tol) {
			return false
		}
	}
	return true
}
