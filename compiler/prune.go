package compiler

// prune drops the values no output, gradient or update needs (the forward
// pass's loss in predict, say, or gradients of values that are not
// parameters) and renumbers what is left.
func prune(p *Program) error {
	for _, f := range p.Funcs() {
		f.Prune()
		f.Renumber()
	}
	return nil
}
