package fuzzgen

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// TestTorchFloat64Rerun checks the float32 oracle's fallback (oracle.go):
// a tensor torch's float32 run gets wrong by its own rounding (fuzz_364:
// a LayerNorm over one value, 0 exactly in ngen and 8.5e-6 in PyTorch)
// passes against the float64 rerun, while an error in ngen larger than
// torch's float32 error still fails.
func TestTorchFloat64Rerun(t *testing.T) {
	spec := &Spec{Name: "s", DType: "f32", Batch: 1}
	newChecker := func() *checker {
		return &checker{o: Options{Steps: 3}, specs: []*Spec{spec}, batch: 1,
			built: &Built{Model: &ir.Model{Optimizer: &ir.Optimizer{Kind: "sgd", LR: 0.1}}, Prefix: []string{""}}}
	}
	ngen := func(out float64) *result {
		return &result{what: "ngen", loss: []float64{1, 0.9, 0.8},
			grads:  map[string][]float64{"w": {0, 0.5}},
			params: map[string][]float64{"w": {1, 2}}, states: map[string][]float64{},
			outs: [][]float64{{out, 0}}}
	}
	torch := func(out, grad float64) torchResult {
		return torchResult{Loss: []num{1, 0.9, 0.8}, Grads: map[string][]num{"w": {num(grad), 0.5}},
			Params: map[string][]num{"w": {1, 2}}, Output: []num{num(out), 0}}
	}
	f32 := []torchResult{torch(8.5e-6, 6e-8)}
	f64 := []torchResult{torch(3e-15, 1e-16)}
	specs := []torchSpec{{Spec: spec}}

	c := newChecker()
	c.compareTorch(ngen(0), specs, f32, nil)
	if len(c.fails) == 0 {
		t.Fatal("against torch's float32 run: no failure; the case does not test the fallback")
	}
	c = newChecker()
	c.compareTorch(ngen(0), specs, f64, f32)
	for _, f := range c.fails {
		t.Errorf("against the float64 rerun: %s", f.Msg)
	}
	c = newChecker()
	c.compareTorch(ngen(1e-4), specs, f64, f32) // 6× torch's own error
	if len(c.fails) != 1 || !strings.Contains(c.fails[0].Msg, "prediction") {
		t.Fatalf("a prediction off by 1e-4 against the float64 rerun: failures %v, want one naming the prediction", c.fails)
	}
}
