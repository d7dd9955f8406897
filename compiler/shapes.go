package compiler

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// inferShapes re-derives every value's type from its op's shape rule and
// reports the first mismatch at the user's source line, naming both shapes.
func inferShapes(p *Program) error {
	m := p.Model
	if m.Loss == nil {
		return fmt.Errorf("model %s (%s): no loss declared", m.Name, m.Pos)
	}
	if len(m.Loss.Shape) != 0 {
		return fmt.Errorf("model %s (%s): loss must be a scalar, got %s", m.Name, m.Loss.Pos, m.Loss.Type())
	}
	if m.Optimizer == nil {
		return fmt.Errorf("model %s (%s): no optimizer declared", m.Name, m.Pos)
	}
	return inferFunc(m.Forward)
}

func inferFunc(f *ir.Func) error {
	for _, v := range f.Values {
		shape, dt, err := ops.Infer(v)
		if err != nil {
			return fmt.Errorf("%s (%s): %v", v.Op, v.Pos, err)
		}
		if !shape.Eq(v.Shape) || dt != v.DType {
			return fmt.Errorf("%s (%s): declared %s%s but the shape rule gives %s%s", v.Op, v.Pos, v.DType, v.Shape, dt, shape)
		}
	}
	return nil
}
