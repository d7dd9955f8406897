package dsl

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
)

// ampMLP declares a small MLP; prec runs after the inputs are declared.
func ampMLP(dt DType, prec func(m *Model)) *Model {
	m := NewModel("amp")
	x := m.Input("x", dt, Batch, 8)
	y := m.Labels("y", Batch)
	prec(m)
	h := m.Linear("fc2", ReLU(m.Linear("fc1", x, 6)), 3)
	m.Output(h)
	m.Loss(CrossEntropy(h, y))
	m.Optimizer(SGD{LR: 0.1})
	return m
}

// TestPrecisionErrors: a bad policy is an error at the user's Precision
// call (or at the op it cannot cover), naming it.
func TestPrecisionErrors(t *testing.T) {
	var l int
	for _, c := range []struct {
		name string
		dt   DType
		prec func(m *Model)
		want string
	}{
		{"init scale 0", F32, func(m *Model) {
			sc := GradScaler()
			sc.InitScale = 0
			l = line() + 1
			m.Precision(AMP{Type: F16, Scaler: sc})
		}, "precision (dsl/precision_test.go:%d): loss scaler: InitScale 0: want a positive scale"},
		{"init scale -1", F32, func(m *Model) { l = line(); m.Precision(AMP{Type: F16, Scaler: &LossScaler{-1, 2, 0.5, 10}}) },
			"precision (dsl/precision_test.go:%d): loss scaler: InitScale -1: want a positive scale"},
		{"init scale inf", F32, func(m *Model) { l = line(); m.Precision(AMP{Type: F16, Scaler: &LossScaler{math.Inf(1), 2, 0.5, 10}}) },
			"precision (dsl/precision_test.go:%d): loss scaler: InitScale +Inf"},
		{"init scale past f32", F32, func(m *Model) { l = line(); m.Precision(AMP{Type: F16, Scaler: &LossScaler{1e39, 2, 0.5, 10}}) },
			"precision (dsl/precision_test.go:%d): loss scaler: InitScale 1e+39"},
		{"init scale NaN", F32, func(m *Model) { l = line(); m.Precision(AMP{Type: BF16, Scaler: &LossScaler{math.NaN(), 2, 0.5, 10}}) },
			"precision (dsl/precision_test.go:%d): loss scaler: InitScale NaN"},
		{"growth 1", F32, func(m *Model) { l = line(); m.Precision(AMP{Type: F16, Scaler: &LossScaler{1024, 1, 0.5, 10}}) },
			"precision (dsl/precision_test.go:%d): loss scaler: GrowthFactor 1: want a finite factor > 1"},
		{"growth inf", F32, func(m *Model) {
			l = line() + 1
			m.Precision(AMP{Type: F16, Scaler: &LossScaler{1024, math.Inf(1), 0.5, 10}})
		},
			"precision (dsl/precision_test.go:%d): loss scaler: GrowthFactor +Inf"},
		{"backoff 1", F32, func(m *Model) { l = line(); m.Precision(AMP{Type: F16, Scaler: &LossScaler{1024, 2, 1, 10}}) },
			"precision (dsl/precision_test.go:%d): loss scaler: BackoffFactor 1: want a factor in (0, 1)"},
		{"backoff 0", F32, func(m *Model) { l = line(); m.Precision(AMP{Type: F16, Scaler: &LossScaler{1024, 2, 0, 10}}) },
			"precision (dsl/precision_test.go:%d): loss scaler: BackoffFactor 0"},
		{"interval 0", F32, func(m *Model) { l = line(); m.Precision(AMP{Type: F16, Scaler: &LossScaler{1024, 2, 0.5, 0}}) },
			"precision (dsl/precision_test.go:%d): loss scaler: GrowthInterval 0: want at least 1 step"},
		{"not a 16-bit type", F32, func(m *Model) { l = line(); m.Precision(AMP{Type: F32}) },
			"precision (dsl/precision_test.go:%d): AMP type f32: want dsl.BF16 or dsl.F16"},
		{"twice", F32, func(m *Model) {
			m.Precision(AMP{Type: BF16})
			l = line() + 1
			m.Precision(AMP{Type: BF16})
		}, "precision (dsl/precision_test.go:%d): the precision is already set"},
		{"f64 model", F64, func(m *Model) { l = line(); m.Precision(AMP{Type: BF16}) },
			"precision (dsl/precision_test.go:%d): mixed precision needs an f32 model, but input \"x\""},
	} {
		_, err := ampMLP(c.dt, c.prec).Build()
		if want := fmt.Sprintf(c.want, l); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", c.name, err, want)
		}
	}

	// A parameter declared in a 16-bit type: master weights are f32.
	m := NewModel("m")
	l = line() + 1
	m.Param("w", BF16, Const(0), 3)
	if _, err := m.Build(); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("param (dsl/precision_test.go:%d): w: dtype bf16", l)) {
		t.Errorf("bf16 param: %v", err)
	}

	// An f64 convolution under mixed precision: the error names the
	// convolution at its line.
	m = NewModel("m")
	pl := line() + 1
	m.Precision(AMP{Type: BF16})
	img := m.Input("x", F64, Batch, 1, 5, 5)
	l = line() + 1
	c := m.Conv2d("conv", img, 2, 3, Conv{})
	m.Output(c)
	m.Loss(Mean(c, false))
	m.Optimizer(SGD{LR: 0.1})
	want := fmt.Sprintf("conv2d (dsl/precision_test.go:%d): its input is f64[B,1,5,5], but mixed precision (precision at dsl/precision_test.go:%d) needs an f32 convolution", l, pl)
	if _, err := m.Build(); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("f64 conv under AMP: %v, want %q", err, want)
	}

	// A recurrence under AMP runs in f32 (torch.autocast on the CPU keeps
	// nn.RNN in f32), with its input GEMM; the Linear after it is bf16.
	m = NewModel("m")
	m.Precision(AMP{Type: BF16})
	x := m.Input("x", F32, Batch, 5, 4)
	y := m.Labels("y", Batch)
	out, _ := m.RNN("rnn", x, 6, Recurrent{BatchFirst: true})
	h := m.Linear("fc", Mean(out, false, 1), 3)
	m.Output(h)
	m.Loss(CrossEntropy(h, y))
	m.Optimizer(SGD{LR: 0.1})
	im, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	prog, err := compiler.Compile(im, compiler.Options{Fuse: true})
	if err != nil {
		t.Fatalf("RNN under AMP: %v", err)
	}
	gemms := map[string]int{}
	for _, v := range prog.Model.Forward.Values {
		switch v.Op {
		case "rnn_scan":
			gemms["scan "+v.DType.String()]++
		case "matmul":
			gemms[v.DType.String()]++
		}
	}
	if gemms["scan f32"] != 1 || gemms["f32"] != 1 || gemms["bf16"] != 1 {
		t.Errorf("RNN under AMP: %v, want the scan and its input GEMM f32, fc's GEMM bf16", gemms)
	}
}

// TestPrecisionScaler: f16 scales by default with GradScaler's defaults,
// bf16 does not unless asked, and a scaler given is taken as given.
func TestPrecisionScaler(t *testing.T) {
	for _, c := range []struct {
		name string
		a    AMP
		want *ir.LossScaler
	}{
		{"f16 default", AMP{Type: F16}, &ir.LossScaler{Init: 65536, Growth: 2, Backoff: 0.5, Interval: 2000}},
		{"bf16 default", AMP{Type: BF16}, nil},
		{"bf16 opted in", AMP{Type: BF16, Scaler: GradScaler()}, &ir.LossScaler{Init: 65536, Growth: 2, Backoff: 0.5, Interval: 2000}},
		{"f16 own", AMP{Type: F16, Scaler: &LossScaler{InitScale: 8, GrowthFactor: 4, BackoffFactor: 0.25, GrowthInterval: 3}}, &ir.LossScaler{Init: 8, Growth: 4, Backoff: 0.25, Interval: 3}},
	} {
		m, err := ampMLP(F32, func(m *Model) { m.Precision(c.a) }).Build()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := m.Precision.Scaler; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: scaler %+v, want %+v", c.name, got, c.want)
		}
		if _, err := compiler.Compile(m, compiler.Options{Fuse: true}); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
