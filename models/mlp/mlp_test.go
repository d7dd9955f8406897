package mlp_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/generated/mlp_unfused"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// End-to-end tests of the generated package, built by cgo from the
// committed generated code.

func device(t *testing.T) runtime.Device {
	dev, err := cpu.New(cpu.Options{})
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

func TestStepLearns(t *testing.T) {
	m, err := mlp.New(device(t), mlp.Options{Batch: 32, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, y := batch(32, 1)
	first, err := m.Step(x, y)
	if err != nil {
		t.Fatal(err)
	}
	var last float32
	for i := 0; i < 30; i++ {
		if last, err = m.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	// Initial loss is near ln 10; 30 Adam steps on one batch must cut it.
	if math.Abs(float64(first)-math.Log(10)) > 0.3 || last > first/2 {
		t.Fatalf("loss %v → %v", first, last)
	}
	// A smaller last batch is fine.
	if _, err := m.Step(x[:5*784], y[:5]); err != nil {
		t.Fatal(err)
	}
	m.Eval()
	out, err := m.Predict(x[:3*784])
	if err != nil || len(out) != 30 {
		t.Fatalf("Predict: %d values, %v", len(out), err)
	}
}

func TestFusedMatchesUnfused(t *testing.T) {
	dev := device(t)
	a, err := mlp.New(dev, mlp.Options{Batch: 16, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	b, err := mlp_unfused.New(dev, mlp_unfused.Options{Batch: 16, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	x, y := batch(16, 2)
	for step := 1; step <= 3; step++ {
		la, err := a.Step(x, y)
		if err != nil {
			t.Fatal(err)
		}
		lb, err := b.Step(x, y)
		if err != nil {
			t.Fatal(err)
		}
		// The loss is accumulated with one atomicAdd per row, in any
		// order: rtol 1e-6.
		if !close(float64(la), float64(lb), 1e-6, 0) {
			t.Fatalf("step %d: loss %v vs %v", step, la, lb)
		}
		for _, name := range a.Params() {
			ga, _ := a.Grad(name)
			gb, _ := b.Grad(name)
			pa, _ := a.Param(name)
			pb, _ := b.Param(name)
			// Same kernels' arithmetic in the same order, but the fused
			// kernels keep intermediates in registers and the host
			// compiler may contract a*b+c into an FMA differently:
			// rtol 1e-5, atol 1e-7.
			for i := range ga {
				if !close(float64(ga[i]), float64(gb[i]), 1e-5, 1e-7) {
					t.Fatalf("step %d: grad %s[%d] %v vs %v", step, name, i, ga[i], gb[i])
				}
				if !close(float64(pa[i]), float64(pb[i]), 1e-5, 1e-7) {
					t.Fatalf("step %d: param %s[%d] %v vs %v", step, name, i, pa[i], pb[i])
				}
			}
		}
	}
	fused, unfused := launches(mlp.Plan), launches(mlp_unfused.Plan)
	if fused >= unfused {
		t.Fatalf("fused plan launches %d kernels, unfused %d", fused, unfused)
	}
	t.Logf("kernels per step: fused %d, unfused %d", fused, unfused)
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

func close(a, b, rtol, atol float64) bool {
	return math.Abs(a-b) <= atol+rtol*math.Abs(b)
}

func TestBadInput(t *testing.T) {
	m, err := mlp.New(device(t), mlp.Options{Batch: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	x, y := batch(8, 1)
	check := func(what string, err error, want ...string) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%s: error %q lacks %q", what, err, w)
			}
		}
		t.Logf("%s: %v", what, err)
	}
	_, err = m.Step(x[:100], y)
	check("ragged batch", err, `"x"`, "[B,784]")
	_, err = m.Step(x, y[:3])
	check("labels for another batch", err, `"y"`)
	x9, y9 := batch(9, 1)
	_, err = m.Step(x9, y9)
	check("batch above Options.Batch", err, "batch of 9")
	bad := append([]int32(nil), y...)
	bad[5] = 12
	_, err = m.Step(x, bad)
	check("label out of range", err, "cross_entropy", "models/mlp/model.go:", "label 12 at row 5")
	// The model stays usable after a bad batch.
	if _, err := m.Step(x, y); err != nil {
		t.Fatalf("after bad labels: %v", err)
	}
	// A NaN weight is refused, as Load refuses one; a NaN input fails
	// the step at the loss.
	w, _ := m.Param("fc3.bias")
	w[0] = float32(math.NaN())
	check("NaN weight", m.SetParam("fc3.bias", w), "fc3.bias", "element 0 is NaN")
	xn := append([]float32(nil), x...)
	xn[3] = float32(math.NaN())
	_, err = m.Step(xn, y)
	check("NaN loss", err, "cross_entropy", "models/mlp/model.go:", "loss is NaN")
}

func TestSaveLoad(t *testing.T) {
	dev := device(t)
	a, _ := mlp.New(dev, mlp.Options{Batch: 8, Seed: 1})
	b, _ := mlp.New(dev, mlp.Options{Batch: 8, Seed: 2})
	x, y := batch(8, 3)
	a.Step(x, y)
	var buf bytes.Buffer
	if err := a.Save(&buf); err != nil {
		t.Fatal(err)
	}
	if err := b.Load(bytes.NewReader(buf.Bytes()[:buf.Len()/2])); err == nil {
		t.Fatal("truncated checkpoint loaded")
	}
	if err := b.Load(&buf); err != nil {
		t.Fatal(err)
	}
	for _, name := range a.Params() {
		pa, _ := a.Param(name)
		pb, _ := b.Param(name)
		for i := range pa {
			if pa[i] != pb[i] {
				t.Fatalf("after load: %s[%d] %v vs %v", name, i, pa[i], pb[i])
			}
		}
	}
	// The checkpoint holds everything a step depends on (parameters,
	// optimizer state, step count, dropout seed), so the next step is
	// bit-identical.
	la, _ := a.Step(x, y)
	lb, _ := b.Step(x, y)
	if la != lb {
		t.Fatalf("after load: %v vs %v", la, lb)
	}
}
