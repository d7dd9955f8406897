// Package deepmlp declares the 24-layer MLP of the gradient-checkpointing
// figures (docs/PERF.md): `ngen report models/deepmlp/model.go` prints
// its planned peak memory and FLOPs with checkpoints and without. It is
// not generated into a package.
package deepmlp

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/dsl"
)

// Layers and Width size the network: 784 → Layers × (Width, ReLU) → 10.
const Layers, Width = 24, 512

// Deep checkpoints runs of 5 ≈ √24 hidden layers, all but the last run.
func Deep() *dsl.Model { return deep("deepmlp", 5) }

// DeepPlain is the same network without checkpoints.
func DeepPlain() *dsl.Model { return deep("deepmlp_plain", 0) }

func deep(name string, segment int) *dsl.Model {
	m := dsl.NewModel(name)
	h := m.Input("x", dsl.F32, dsl.Batch, 784)
	y := m.Labels("y", dsl.Batch)
	layer := func(l int) func() *dsl.Tensor {
		return func() *dsl.Tensor { return dsl.ReLU(m.Linear(fmt.Sprintf("fc%d", l+1), h, Width)) }
	}
	for l := 0; l < Layers; {
		n := Layers - l
		if segment > 0 && n > segment {
			n = segment
			h = m.Checkpoint(func() *dsl.Tensor {
				for i := 0; i < segment; i++ {
					h = layer(l + i)()
				}
				return h
			})
		} else {
			h = layer(l)()
			n = 1
		}
		l += n
	}
	logits := m.Linear("out", h, 10)
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(dsl.Adam{LR: 1e-3, Clip: dsl.ClipGradNorm(math.Inf(1))})
	return m
}
