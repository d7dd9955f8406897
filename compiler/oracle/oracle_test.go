package oracle

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func need(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
}

func f32(shape []int, data ...float64) Tensor { return Tensor{Shape: shape, Data: data} }

// expectClose compares with rtol 1e-6: the f32 cases round once or twice, and the
// expected values below are worked out in float64.
func expectClose(t *testing.T, what string, got *Tensor, shape []int, want ...float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s: missing", what)
		return
	}
	if !slices.Equal(got.Shape, shape) || len(got.Data) != len(want) {
		t.Errorf("%s: shape %v with %d values, want %v with %d", what, got.Shape, len(got.Data), shape, len(want))
		return
	}
	for i, w := range want {
		g := got.Data[i]
		if g == w {
			continue
		}
		if math.IsInf(w, 0) || math.IsInf(g, 0) || math.IsNaN(g) || math.Abs(g-w) > 1e-6*math.Max(1, math.Abs(w)) {
			t.Errorf("%s: got %v, want %v", what, got.Data, want)
			return
		}
	}
}

func TestOracleOps(t *testing.T) {
	need(t)
	ones := func(shape []int, n int) *Tensor {
		g := Tensor{Shape: shape, Data: make([]float64, n)}
		for i := range g.Data {
			g.Data[i] = 1
		}
		return &g
	}
	cases := []Case{
		{ // [2,1] + [3] broadcasts to [2,3]
			Op: "add", DType: "f32",
			Inputs:     []Tensor{f32([]int{2, 1}, 1, 2), f32([]int{3}, 10, 20, 30)},
			GradOutput: &Tensor{Shape: []int{2, 3}, Data: []float64{1, 2, 3, 4, 5, 6}},
		},
		{ // [2,3] @ [2,3]^T
			Op: "matmul", DType: "f64", Attrs: map[string]any{"transb": true},
			Inputs:     []Tensor{f32([]int{2, 3}, 1, 2, 3, 4, 5, 6), f32([]int{2, 3}, 1, 0, 0, 0, 1, 1)},
			GradOutput: ones([]int{2, 2}, 4),
		},
		{
			Op: "cross_entropy", DType: "f64",
			Inputs: []Tensor{
				f32([]int{2, 3}, 0, 0, 0, 0, 0, math.Log(2)),
				{Shape: []int{2}, DType: "i32", Data: []float64{1, 2}},
			},
			GradOutput: &Tensor{Shape: []int{}, Data: []float64{1}},
		},
		{
			Op: "sum", DType: "f32", Attrs: map[string]any{"axes": []int{0}, "keepdim": true},
			Inputs:     []Tensor{f32([]int{2, 3}, 1, 2, 3, 4, 5, 6)},
			GradOutput: &Tensor{Shape: []int{1, 3}, Data: []float64{1, 2, 3}},
		},
		{ // log(0) = -Inf and its gradient +Inf must survive the JSON round trip
			Op: "log", DType: "f64",
			Inputs:     []Tensor{f32([]int{2}, 0, math.Inf(1))},
			GradOutput: ones([]int{2}, 2),
		},
	}
	res, err := Run(cases)
	if err != nil {
		t.Fatal(err)
	}

	add := res[0]
	expectClose(t, "add out", &add.Output, []int{2, 3}, 11, 21, 31, 12, 22, 32)
	expectClose(t, "add dx", add.Grads[0], []int{2, 1}, 6, 15)
	expectClose(t, "add dy", add.Grads[1], []int{3}, 5, 7, 9)
	if add.Output.DType != "f32" {
		t.Errorf("add output dtype %q, want f32", add.Output.DType)
	}

	mm := res[1]
	expectClose(t, "matmul out", &mm.Output, []int{2, 2}, 1, 5, 4, 11)
	// dA = G B = ones(2,2) @ [[1,0,0],[0,1,1]]; dB = G^T A.
	expectClose(t, "matmul dA", mm.Grads[0], []int{2, 3}, 1, 1, 1, 1, 1, 1)
	expectClose(t, "matmul dB", mm.Grads[1], []int{2, 3}, 5, 7, 9, 5, 7, 9)

	// Row 0: uniform over 3, label 1: loss ln 3. Row 1: logits 0,0,ln2, so
	// softmax 1/4,1/4,1/2 and label 2 costs ln 2. Mean over 2 rows.
	ce := res[2]
	expectClose(t, "cross_entropy out", &ce.Output, []int{}, (math.Log(3)+math.Log(2))/2)
	expectClose(t, "cross_entropy dlogits", ce.Grads[0], []int{2, 3},
		1.0/6, (1.0/3-1)/2, 1.0/6, 1.0/8, 1.0/8, -1.0/4)
	if ce.Grads[1] != nil {
		t.Errorf("integer labels got gradient %v, want nil", ce.Grads[1])
	}

	sum := res[3]
	expectClose(t, "sum out", &sum.Output, []int{1, 3}, 5, 7, 9)
	expectClose(t, "sum dx", sum.Grads[0], []int{2, 3}, 1, 2, 3, 1, 2, 3)

	lg := res[4]
	expectClose(t, "log out", &lg.Output, []int{2}, math.Inf(-1), math.Inf(1))
	expectClose(t, "log dx", lg.Grads[0], []int{2}, math.Inf(1), 0)
}

func TestOracleUnknownOp(t *testing.T) {
	need(t)
	_, err := Run([]Case{{Op: "frobnicate", DType: "f32"}})
	if err == nil || !strings.Contains(err.Error(), "unknown op 'frobnicate'") {
		t.Errorf("got %v, want an error naming the unknown op", err)
	}
}

// TestServerMatchesOneShot runs requests of two scripts, and a failing one,
// through the long-lived python and through a python per request: the
// same results, the failure's message from the script, and the server
// still serving after it.
func TestServerMatchesOneShot(t *testing.T) {
	need(t)
	add := []Case{{Op: "add", DType: "f64", Inputs: []Tensor{{Shape: []int{2}, Data: []float64{1, 2}}, {Shape: []int{2}, Data: []float64{0.5, 0.25}}}}}
	lr := map[string]any{"steps": 3, "lr": 0.1, "schedules": []any{map[string]any{"kind": "step", "step_size": 2, "gamma": 0.5}}}
	type outs struct {
		ops []Result
		lr  any
		err error
	}
	run := func() outs {
		var o outs
		var err error
		for i := 0; i < 2; i++ { // twice: the second request finds the script imported
			if o.ops, err = Run(add); err != nil {
				t.Fatal(err)
			}
		}
		if err := RunScript("torch_lr.py", lr, &o.lr); err != nil {
			t.Fatal(err)
		}
		_, o.err = Run([]Case{{Op: "frobnicate", DType: "f32"}})
		if _, err := Run(add); err != nil {
			t.Fatalf("after a failed request: %v", err)
		}
		return o
	}
	served := run()
	t.Setenv("NGEN_ORACLE_SERVER", "0")
	once := run()
	if !reflect.DeepEqual(served.ops, once.ops) || !reflect.DeepEqual(served.lr, once.lr) {
		t.Errorf("served %v %v, one-shot %v %v", served.ops, served.lr, once.ops, once.lr)
	}
	for _, e := range []error{served.err, once.err} {
		if e == nil || !strings.Contains(e.Error(), "unknown op 'frobnicate'") {
			t.Errorf("failing request: %v, want the script's message", e)
		}
	}
}
