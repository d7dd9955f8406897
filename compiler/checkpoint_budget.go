package compiler

import (
	"fmt"
	"math"
	"strings"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// withinBudget chooses checkpoint segments so that the planned peak at the
// reference batch fits opts.MemoryBudget, the way √L checkpointing does
// (Chen et al., 2016): the forward pass is cut into layers (a new layer
// starts at each op that reads another layer's parameters), runs of about
// √L layers become segments, and segments are checkpointed from the first
// (whose activations live longest) until the plan fits. The last run,
// whose backward follows at once, is never checkpointed, nor what the user
// already marked. It returns a copy of m with the marks; m itself is not
// changed.
func withinBudget(m *ir.Model, opts Options) (*ir.Model, error) {
	o := opts
	o.DumpTo, o.MemoryBudget = nil, 0
	p, err := compile(m, o)
	if err != nil {
		return nil, err
	}
	if p.PeakBytes <= opts.MemoryBudget {
		return m, nil
	}
	layers := splitLayers(m.Forward)
	L := len(layers)
	if L < 3 {
		return nil, fmt.Errorf("model %s (%s): -memory-budget %d bytes: the plan needs %d at batch %d, and %d layers leave nothing to checkpoint",
			m.Name, m.Pos, opts.MemoryBudget, p.PeakBytes, opts.RefBatch, L)
	}
	per := max(1, int(math.Round(math.Sqrt(float64(L)))))
	nseg := (L - 1 + per - 1) / per // segments over all layers but the last
	best := p.PeakBytes
	next := 1
	for _, v := range m.Forward.Values {
		next = max(next, v.Checkpoint+1)
	}
	for k := 1; k < nseg; k++ {
		c := withSegments(m, layers, per, k, next)
		q, err := compile(c, o)
		if err != nil {
			return nil, err
		}
		best = min(best, q.PeakBytes)
		if q.PeakBytes <= opts.MemoryBudget {
			return c, nil
		}
	}
	return nil, fmt.Errorf("model %s (%s): -memory-budget %d bytes: the smallest plan found needs %d at batch %d (%d without checkpointing)",
		m.Name, m.Pos, opts.MemoryBudget, best, opts.RefBatch, p.PeakBytes)
}

// splitLayers cuts the forward values into layers: a layer starts at the
// first op that reads a parameter of a layer not seen yet (layerOf).
func splitLayers(f *ir.Func) [][]*ir.Value {
	var layers [][]*ir.Value
	seen := map[string]bool{}
	var cur []*ir.Value
	for _, v := range f.Values {
		if v.Role != ir.Temp {
			continue
		}
		for _, a := range v.Args {
			if a.Role != ir.Param {
				continue
			}
			name := layerOf(a.Name)
			if !seen[name] {
				seen[name] = true
				if len(cur) > 0 {
					layers = append(layers, cur)
				}
				cur = nil
			}
		}
		cur = append(cur, v)
	}
	if len(cur) > 0 {
		layers = append(layers, cur)
	}
	return layers
}

// withSegments is a copy of m whose first k runs of per layers are
// checkpoint segments next, next+1, ...
func withSegments(m *ir.Model, layers [][]*ir.Value, per, k, next int) *ir.Model {
	f, vm := m.Forward.Clone("forward")
	c := *m
	c.Forward, c.Loss, c.Output = f, vm[m.Loss], vm[m.Output]
	for i, l := range layers {
		if i/per >= k {
			break
		}
		for _, v := range l {
			if nv := vm[v]; nv.Checkpoint == 0 {
				nv.Checkpoint = next + i/per
			}
		}
	}
	return &c
}

// noteWithout compiles the model again without checkpoints, when it has
// any, for the report's comparison.
func noteWithout(p *Program, m *ir.Model, opts Options) error {
	marked := false
	for _, v := range m.Forward.Values {
		marked = marked || v.Checkpoint > 0
	}
	if !marked {
		return nil
	}
	f, vm := m.Forward.Clone("forward")
	c := *m
	c.Forward, c.Loss, c.Output = f, vm[m.Loss], vm[m.Output]
	for _, v := range f.Values {
		v.Checkpoint = 0
	}
	o := opts
	o.DumpTo, o.MemoryBudget = nil, 0
	w, err := compile(&c, o)
	if err != nil {
		return err
	}
	p.Without = w
	return nil
}

// layerOf names the layer a parameter belongs to: the name before its last
// dot (fc1.weight and fc1.bias are layer fc1), with a stacked recurrent
// module's layer suffix (lstm.weight_ih_l1 and lstm.bias_hh_l1 are layer
// lstm_l1, as PyTorch names them).
func layerOf(param string) string {
	i := strings.LastIndex(param, ".")
	if i <= 0 {
		return param
	}
	last := param[i+1:]
	if j := strings.LastIndex(last, "_l"); j > 0 && j+2 < len(last) {
		k := j + 2
		for k < len(last) && last[k] >= '0' && last[k] <= '9' {
			k++
		}
		if k > j+2 && (k == len(last) || last[k:] == "_reverse") {
			return param[:i] + last[j:]
		}
	}
	return param[:i]
}
