package compiler

import (
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// deriveFuncs makes the training step and the predict functions from the
// declared forward function. Predict runs in whichever mode the session is
// in (the train flag, as torch's model.train()/eval()); when the forward
// reads that flag, predict_eval is predict specialised to eval mode, which
// the generated API runs instead in eval mode. Inference never changes
// the model: predict drops the forward's state updates, so in training
// mode it normalises with the batch's statistics but, unlike PyTorch's
// forward, leaves batch norm's running statistics alone.
func deriveFuncs(p *Program) error {
	m := p.Model
	step, sm := m.Forward.Clone("step")
	step.Outputs = map[string]*ir.Value{"loss": sm[m.Loss]}
	p.Step = step
	if m.Output != nil {
		pred, pm := m.Forward.Clone("predict")
		pred.Outputs = map[string]*ir.Value{"output": pm[m.Output]}
		// Further named results of the forward (an RNN's final states)
		// are read back after predict.
		for name, v := range m.Forward.Outputs {
			pred.Outputs[name] = pm[v]
		}
		pred.Updates = nil
		pred.Prune()
		pred.Renumber()
		p.Predict = pred
		p.PredictEval = evalOnly(pred)
	}
	return nil
}

// evalOnly returns a copy of f in eval mode, or nil when f does not read
// the train flag: each op that reads it becomes the argument its row
// names (Def.InEval: where_train's eval operand, dropout's input), so what only training mode reads (batch statistics,
// dropout masks) is pruned, and state updates that become no-ops are
// dropped.
func evalOnly(f *ir.Func) *ir.Func {
	g, _ := f.Clone("predict_eval")
	repl := map[*ir.Value]*ir.Value{}
	resolve := func(v *ir.Value) *ir.Value {
		if r, ok := repl[v]; ok {
			return r
		}
		return v
	}
	for _, v := range g.Values {
		for i, a := range v.Args {
			v.Args[i] = resolve(a)
		}
		if d := ops.Lookup(v.Op); d != nil && d.InEval != nil {
			if a := d.InEval(v); a != nil {
				repl[v] = a
			}
		}
	}
	if len(repl) == 0 {
		return nil
	}
	for k, v := range g.Outputs {
		g.Outputs[k] = resolve(v)
	}
	var ups []ir.Update
	for _, u := range g.Updates {
		if n := resolve(u.New); n != u.State {
			ups = append(ups, ir.Update{State: u.State, New: n})
		}
	}
	g.Updates = ups
	g.Prune()
	g.Renumber()
	return g
}
