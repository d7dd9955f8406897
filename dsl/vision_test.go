package dsl

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

func convNet(bn bool) *Model {
	m := NewModel("c")
	x := m.Input("x", F32, Batch, 1, 28, 28)
	y := m.Labels("y", Batch)
	h := m.Conv2d("conv1", x, 8, 3, Conv{Padding: 1})
	if bn {
		h = m.BatchNorm2d("bn1", h)
	}
	h = MaxPool2d(ReLU(h), 2)
	logits := m.Linear("fc", Flatten(h), 10)
	m.Output(logits)
	m.Loss(CrossEntropy(logits, y))
	m.Optimizer(Adam{LR: 1e-3})
	return m
}

func TestVisionShapes(t *testing.T) {
	im, err := convNet(true).Build()
	if err != nil {
		t.Fatal(err)
	}
	if got := im.Output.Shape.String(); got != "[B,10]" {
		t.Errorf("logits %s", got)
	}
	params, states := 0, 0
	for _, v := range im.Forward.Values {
		switch v.Role {
		case ir.Param:
			params++
		case ir.State:
			states++
		}
	}
	// conv weight and bias, bn weight and bias, fc weight and bias.
	if params != 6 || states != 2 || len(im.Forward.Updates) != 2 {
		t.Errorf("%d params, %d state buffers, %d updates", params, states, len(im.Forward.Updates))
	}
	// Updates survive the trip from the evaluated DSL to ngen build.
	data, err := json.Marshal(im)
	if err != nil {
		t.Fatal(err)
	}
	var back ir.Model
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Forward.Updates) != 2 || back.Forward.Updates[0].State.Name != "bn1.running_mean" {
		t.Errorf("updates after JSON: %+v", back.Forward.Updates)
	}
}

func TestVisionErrorsNameTheLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   string
		want string
		decl func(m *Model, x *Tensor) (*Tensor, int)
	}{
		{"channels not divisible by groups", "conv2d", "divisible by groups", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			return m.Conv2d("c", x, 4, 3, Conv{Groups: 2}), l
		}},
		{"output channels not divisible by groups", "conv2d", "divisible by groups", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			return m.Conv2d("c", x, 4, 3, Conv{Groups: 3}), l
		}},
		// Issue 27: the message named the weight's dimension -2.
		{"negative groups", "conv2d", "c: groups -2 must be positive", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			return m.Conv2d("c", x, 4, 3, Conv{Groups: -2}), l
		}},
		{"kernel larger than the padded input", "conv2d", "window 31x31 (dilation 1x1) does not fit the 28x28 input padded by 1x1", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			return m.Conv2d("c", x, 4, 31, Conv{Padding: 1}), l
		}},
		{"dilated kernel larger than the input", "conv2d", "does not fit", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			return m.Conv2d("c", x, 4, 5, Conv{Dilation: 7}), l
		}},
		{"conv of a matrix", "conv2d", "must be N×C×H×W", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			return m.Conv2d("c", Flatten(x), 4, 3), l
		}},
		// A later layer's channels cannot mismatch: Conv2d sizes its
		// weight from its input (compiler/ops tests the IR-level check).
		{"second conv after a pool too small for its kernel", "conv2d", "does not fit the 7x7 input", func(m *Model, x *Tensor) (*Tensor, int) {
			h := MaxPool2d(m.Conv2d("c1", x, 4, 3, Conv{Padding: 1}), 4)
			l := line() + 1
			return m.Conv2d("c2", h, 8, 9), l
		}},
		{"pool padding over half the kernel", "maxpool2d", "at most half", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			return MaxPool2d(x, 2, Pool{Padding: 2}), l
		}},
		{"pool window larger than the input", "maxpool2d", "does not fit", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			return MaxPool2d(x, 29), l
		}},
		{"avgpool window larger than the input", "avgpool", "does not fit", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			return AvgPool2d(x, 29, Pool{Stride: 2}), l
		}},
		{"avgpool with dilation", "avgpool", "no dilation", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			return AvgPool2d(x, 2, Pool{Dilation: 2}), l
		}},
		{"flatten of a vector", "flatten", "rank ≥ 2", func(m *Model, x *Tensor) (*Tensor, int) {
			v := m.Input("v", F32, Batch)
			l := line() + 1
			return Flatten(v), l
		}},
		{"batch norm of a matrix", "batchnorm2d", "must be N×C×H×W", func(m *Model, x *Tensor) (*Tensor, int) {
			l := line() + 1
			return m.BatchNorm2d("bn", Flatten(x)), l
		}},
	} {
		m := NewModel("bad")
		x := m.Input("x", F32, Batch, 3, 28, 28)
		h, l := tc.decl(m, x)
		m.Loss(Sum(h, false))
		_, err := m.Build()
		pos := fmt.Sprintf("dsl/vision_test.go:%d", l)
		if err == nil || !strings.Contains(err.Error(), tc.op) || !strings.Contains(err.Error(), pos) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %s at %s: %s", tc.name, err, tc.op, pos, tc.want)
		}
	}
}
