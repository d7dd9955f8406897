// Package prints declares a model whose package prints to stdout.
package prints

import (
	"fmt"

	"github.com/ngen-ml/ngen/dsl"
)

func init() { fmt.Println("hello from init") }

// Chatty prints while it declares a working model.
func Chatty() *dsl.Model {
	fmt.Println("hello from the model")
	m := dsl.NewModel("chatty")
	x := m.Input("x", dsl.F32, dsl.Batch, 4)
	y := m.Labels("y", dsl.Batch)
	h := m.Linear("fc", x, 3)
	m.Output(h)
	m.Loss(dsl.CrossEntropy(h, y))
	m.Optimizer(dsl.SGD{LR: 0.1})
	return m
}
