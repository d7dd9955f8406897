// Package niltensor passes a nil tensor on line 12.
package niltensor

import "github.com/ngen-ml/ngen/dsl"

// Nil loses a tensor.
func Nil() *dsl.Model {
	m := dsl.NewModel("niltensor")
	x := m.Input("x", dsl.F32, dsl.Batch, 4)
	var lost *dsl.Tensor
	_ = lost.Shape()
	m.Output(dsl.ReLU(lost))
	m.Loss(dsl.Sum(x, false))
	m.Optimizer(dsl.SGD{LR: 0.1})
	return m
}
