// Package convnet declares the seed convolutional networks for 1×28×28
// images (Fashion-MNIST).
package convnet

//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated model.go
//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated -fuse=none -suffix=_unfused model.go

import (
	"math"

	"github.com/ngen-ml/ngen/dsl"
)

// ConvNet is the seed model: conv 32 (3×3, pad 1), ReLU, maxpool 2,
// conv 64 (3×3, pad 1), ReLU, maxpool 2, fc 128, ReLU, fc 10,
// cross-entropy, Adam(lr 1e-3).
func ConvNet() *dsl.Model {
	m := dsl.NewModel("convnet")
	x := m.Input("x", dsl.F32, dsl.Batch, 1, 28, 28)
	y := m.Labels("y", dsl.Batch)
	h := dsl.MaxPool2d(dsl.ReLU(m.Conv2d("conv1", x, 32, 3, dsl.Conv{Padding: 1})), 2)
	h = dsl.MaxPool2d(dsl.ReLU(m.Conv2d("conv2", h, 64, 3, dsl.Conv{Padding: 1})), 2)
	h = dsl.ReLU(m.Linear("fc1", dsl.Flatten(h), 128))
	logits := m.Linear("fc2", h, 10)
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(dsl.Adam{LR: 1e-3, Clip: dsl.ClipGradNorm(math.Inf(1))})
	return m
}

// ConvNetBN is ConvNet with BatchNorm2d after each convolution.
func ConvNetBN() *dsl.Model {
	m := dsl.NewModel("convnet_bn")
	x := m.Input("x", dsl.F32, dsl.Batch, 1, 28, 28)
	y := m.Labels("y", dsl.Batch)
	h := dsl.MaxPool2d(dsl.ReLU(m.BatchNorm2d("bn1", m.Conv2d("conv1", x, 32, 3, dsl.Conv{Padding: 1}))), 2)
	h = dsl.MaxPool2d(dsl.ReLU(m.BatchNorm2d("bn2", m.Conv2d("conv2", h, 64, 3, dsl.Conv{Padding: 1}))), 2)
	h = dsl.ReLU(m.Linear("fc1", dsl.Flatten(h), 128))
	logits := m.Linear("fc2", h, 10)
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(dsl.Adam{LR: 1e-3, Clip: dsl.ClipGradNorm(math.Inf(1))})
	return m
}
