package compiler

import "github.com/ngen-ml/ngen/compiler/ir"

// deriveFuncs makes the training step and the predict function from the
// declared forward function.
func deriveFuncs(p *Program) error {
	m := p.Model
	step, sm := m.Forward.Clone("step")
	step.Outputs = map[string]*ir.Value{"loss": sm[m.Loss]}
	p.Step = step
	if m.Output != nil {
		pred, pm := m.Forward.Clone("predict")
		pred.Outputs = map[string]*ir.Value{"output": pm[m.Output]}
		pred.Prune()
		pred.Renumber()
		p.Predict = pred
	}
	return nil
}
