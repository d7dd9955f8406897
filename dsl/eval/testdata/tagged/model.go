//go:build ignore

// Package tagged declares a model in a file its build constraint leaves
// out of the package.
package tagged

import "github.com/ngen-ml/ngen/dsl"

// Tagged is never imported.
func Tagged() *dsl.Model {
	m := dsl.NewModel("tagged")
	x := m.Input("x", dsl.F32, dsl.Batch, 4)
	y := m.Labels("y", dsl.Batch)
	logits := m.Linear("fc", x, 3)
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(dsl.SGD{LR: 0.1})
	return m
}
