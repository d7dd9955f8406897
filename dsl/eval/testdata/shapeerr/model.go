// Package shapeerr declares a model with a shape error on line 11.
package shapeerr

import "github.com/ngen-ml/ngen/dsl"

// Bad multiplies mismatched matrices.
func Bad() *dsl.Model {
	m := dsl.NewModel("bad")
	x := m.Input("x", dsl.F32, dsl.Batch, 784)
	w := m.Param("w", dsl.F32, dsl.Const(0), 512, 100)
	y := dsl.MatMul(x, w)
	m.Loss(dsl.Sum(y, false))
	return m
}
