// Package mlp declares the seed multilayer perceptrons.
package mlp

//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated model.go
//go:generate go run github.com/ngen-ml/ngen/cmd/ngen build -o ../../generated -fuse=none -suffix=_unfused model.go

import (
	"math"

	"github.com/ngen-ml/ngen/dsl"
)

// MLP is the seed model: 784 → 512 ReLU Dropout(0.2) → 256 ReLU
// Dropout(0.2) → 10, cross-entropy, Adam(lr 1e-3).
func MLP() *dsl.Model {
	m := dsl.NewModel("mlp")
	x := m.Input("x", dsl.F32, dsl.Batch, 784)
	y := m.Labels("y", dsl.Batch)
	h := dsl.Dropout(dsl.ReLU(m.Linear("fc1", x, 512)), 0.2)
	h = dsl.Dropout(dsl.ReLU(m.Linear("fc2", h, 256)), 0.2)
	logits := m.Linear("fc3", h, 10)
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(dsl.Adam{LR: 1e-3, Clip: dsl.ClipGradNorm(math.Inf(1))})
	return m
}

// Bench is the seed benchmark model: 1024 → 2048 ReLU → 512 ReLU → 10,
// cross-entropy, Adam(lr 1e-3).
func Bench() *dsl.Model {
	m := dsl.NewModel("mlpbench")
	x := m.Input("x", dsl.F32, dsl.Batch, 1024)
	y := m.Labels("y", dsl.Batch)
	h := dsl.ReLU(m.Linear("fc1", x, 2048))
	h = dsl.ReLU(m.Linear("fc2", h, 512))
	logits := m.Linear("fc3", h, 10)
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(dsl.Adam{LR: 1e-3, Clip: dsl.ClipGradNorm(math.Inf(1))})
	return m
}
