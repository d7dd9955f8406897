package fuzzgen

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/dsl"
)

// Built is one or more specs declared in one dsl.Model: each spec's
// inputs and layers are prefixed (Prefix) and their losses summed, so
// that one compilation checks them all. With more than one spec, each
// spec's output is also a named output (Prefix + "out").
type Built struct {
	Model  *ir.Model
	Specs  []*Spec
	Prefix []string
	// Streams[k][i] is the first dropout stream node i of spec k draws
	// (0: none).
	Streams [][]int
}

// Prefix is the name prefix of spec k of n in one model.
func Prefix(k, n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf("s%d_", k)
}

// Build declares s alone as a model.
func (s *Spec) Build() (*Built, error) { return BuildAll(s.Name, []*Spec{s}) }

// BuildAll declares specs in one model named name. They must share a
// dtype and an optimizer (a model has one).
func BuildAll(name string, specs []*Spec) (*Built, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("fuzzgen: no specs")
	}
	dt := dsl.F32
	if specs[0].DType == "f64" {
		dt = dsl.F64
	}
	m := dsl.NewModel(name)
	b := &builder{m: m, dt: dt}
	out := &Built{Specs: specs}
	var total *dsl.Tensor
	for k, s := range specs {
		if s.DType != specs[0].DType || s.Opt != specs[0].Opt {
			return nil, fmt.Errorf("fuzzgen: spec %s has dtype %s and optimizer %+v, spec %s %s and %+v: one model has one of each",
				s.Name, s.DType, s.Opt, specs[0].Name, specs[0].DType, specs[0].Opt)
		}
		b.prefix = Prefix(k, len(specs))
		vals, streams, err := b.spec(s)
		if err != nil {
			return nil, fmt.Errorf("spec %s: %v", s.Name, err)
		}
		out.Prefix = append(out.Prefix, b.prefix)
		out.Streams = append(out.Streams, streams)
		loss := vals[s.Loss.N][s.Loss.O]
		if total == nil {
			total = loss
		} else {
			total = dsl.Add(total, loss)
		}
		o := vals[s.Output.N][s.Output.O]
		if k == 0 {
			m.Output(o)
		}
		if len(specs) > 1 {
			m.OutputNamed(b.prefix+"out", o)
		}
	}
	m.Loss(total)
	m.Optimizer(specs[0].Opt.DSL())
	irm, err := m.Build()
	if err != nil {
		return nil, err
	}
	if got := maxStream(irm); got != b.stream {
		return nil, fmt.Errorf("fuzzgen: counted %d dropout streams, the model has %d (a row's streams is wrong)", b.stream, got)
	}
	out.Model = irm
	return out, nil
}

// spec makes the DSL calls of s's nodes, checkpointed segments inside
// m.Checkpoint, and checks each result's shape against the node's.
func (b *builder) spec(s *Spec) ([][]*dsl.Tensor, []int, error) {
	vals := make([][]*dsl.Tensor, len(s.Nodes))
	streams := make([]int, len(s.Nodes))
	var err error
	node := func(i int) {
		n := &s.Nodes[i]
		args := make([]*dsl.Tensor, len(n.Args))
		for j, a := range n.Args {
			args[j] = vals[a.N][a.O]
		}
		row := table[n.Op]
		if row.streams != nil {
			if k := row.streams(n); k > 0 {
				streams[i] = b.stream + 1
				b.stream += k
			}
		}
		vals[i] = row.build(b, n, args)
		if b.m.Err() != nil {
			if err == nil {
				err = fmt.Errorf("node %d (%s): %v", i, n.Op, b.m.Err())
			}
			return
		}
		if len(vals[i]) != len(n.Out) {
			err = fmt.Errorf("node %d (%s): %d results, want %d", i, n.Op, len(vals[i]), len(n.Out))
			return
		}
		for o, t := range vals[i] {
			if got, want := t.Shape(), n.Out[o].String(); got != want && err == nil {
				err = fmt.Errorf("node %d (%s) result %d: the DSL made %s, the fuzzgen rule %s", i, n.Op, o, got, want)
			}
		}
	}
	for i := 0; i < len(s.Nodes) && err == nil; {
		ck := s.Nodes[i].Ckpt
		if ck == 0 {
			node(i)
			i++
			continue
		}
		j := i
		for j < len(s.Nodes) && s.Nodes[j].Ckpt == ck {
			j++
		}
		b.m.Checkpoint(func() *dsl.Tensor {
			for t := i; t < j; t++ {
				node(t)
			}
			if err != nil {
				return nil
			}
			return vals[j-1][0]
		})
		i = j
	}
	if err == nil && b.m.Err() != nil {
		err = b.m.Err()
	}
	return vals, streams, err
}

// maxStream is the highest dropout stream any op of m draws from.
func maxStream(m *ir.Model) int {
	top := 0
	for _, v := range m.Forward.Values {
		if v.Op == "dropout" || v.Op == "attention" && v.Attrs.F2 > 0 {
			top = max(top, v.Attrs.I)
		}
	}
	return top
}

// DSL is the optimizer as the DSL's value.
func (o Opt) DSL() dsl.Optimizer {
	switch o.Kind {
	case "sgd":
		return dsl.SGD{LR: o.LR, Momentum: o.Momentum, Dampening: o.Dampening, WeightDecay: o.WeightDecay, Nesterov: o.Nesterov}
	case "adamw":
		return dsl.AdamW{LR: o.LR, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay, NoWeightDecay: o.NoWeightDecay}
	}
	return dsl.Adam{LR: o.LR, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: o.WeightDecay}
}

// Source is the Go source of the optimizer's value.
func (o Opt) Source() string {
	f := func(name string, v float64) string {
		if v == 0 {
			return ""
		}
		return fmt.Sprintf(", %s: %s", name, goFloat(v))
	}
	switch o.Kind {
	case "sgd":
		s := "dsl.SGD{LR: " + goFloat(o.LR) + f("Momentum", o.Momentum) + f("Dampening", o.Dampening) + f("WeightDecay", o.WeightDecay)
		if o.Nesterov {
			s += ", Nesterov: true"
		}
		return s + "}"
	case "adamw":
		s := "dsl.AdamW{LR: " + goFloat(o.LR) + f("Beta1", o.Beta1) + f("Beta2", o.Beta2) + f("Eps", o.Eps) + f("WeightDecay", o.WeightDecay)
		if o.NoWeightDecay {
			s += ", NoWeightDecay: true"
		}
		return s + "}"
	}
	return "dsl.Adam{LR: " + goFloat(o.LR) + f("Beta1", o.Beta1) + f("Beta2", o.Beta2) + f("Eps", o.Eps) + f("WeightDecay", o.WeightDecay) + "}"
}
