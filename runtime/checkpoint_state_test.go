package runtime

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime/safetensors"
)

// TestNegativeRunningVar (issue 27's second hostile pass): a correctly
// signed checkpoint whose batch norm running variance held -1 loaded, and
// every eval-mode prediction was NaN (the square root of var + eps).
func TestNegativeRunningVar(t *testing.T) {
	names := []string{"bn.running_var"}
	ents := map[string]ckptEntry{"bn.running_var": {buf: 0, n: 3, shape: []int64{3}, dtype: F32}}
	file := func(vs ...float32) []byte {
		return fuzzFile(t, map[string]string{"ngen.step": "0"}, []safetensors.Tensor{{Name: "bn.running_var", DType: "F32", Shape: []int64{3}, Data: f32s(vs...)}})
	}
	if _, err := decodeCheckpoint(file(1, 0, 2), names, ents, Optimizer{Kind: "sgd", LR: 0.1}, 0.1, 1); err != nil {
		t.Fatalf("a valid variance: %v", err)
	}
	_, err := decodeCheckpoint(file(1, -1, 2), names, ents, Optimizer{Kind: "sgd", LR: 0.1}, 0.1, 1)
	if err == nil || !strings.Contains(err.Error(), `"bn.running_var" has a negative value at element 1`) {
		t.Fatalf("running_var -1: err = %v", err)
	}
}
