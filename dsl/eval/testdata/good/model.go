// Package good declares two models for eval's tests.
package good

import (
	"fmt"

	"github.com/ngen-ml/ngen/dsl"
)

// Tiny is evaluated.
func Tiny() *dsl.Model {
	m := dsl.NewModel("tiny")
	x := m.Input("x", dsl.F32, dsl.Batch, 4)
	y := m.Labels("y", dsl.Batch)
	logits := m.Linear("fc", x, 3)
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(dsl.SGD{LR: 0.1})
	return m
}

// Model is a second model; its name is not what eval looks for.
func Model() *Alias {
	m := dsl.NewModel("second")
	x := m.Input("x", dsl.F64, dsl.Batch, 2)
	m.Output(x)
	m.Loss(dsl.Mean(dsl.Square(m.LinearNoBias("w", x, 1)), false))
	m.Optimizer(dsl.Adam{LR: 1e-2})
	fmt.Println("user output") // must not corrupt the JSON
	return m
}

// Alias is dsl.Model by another name; the signature check sees through it.
type Alias = dsl.Model

// tiny is unexported: skipped.
func tiny() *dsl.Model { return Tiny() }

// WithArg has the wrong signature: skipped.
func WithArg(n int) *dsl.Model { return Tiny() }

// NotAModel returns something else: skipped.
func NotAModel() *int { return nil }

var _ = tiny
