package fuzzgen

import "fmt"

// Shrink returns the smallest spec it finds for which fails still holds,
// trying at most budget candidates (each usually a compilation): it
// replaces nodes by inputs of their shape, bypasses nodes whose operand
// has their shape, drops loss terms, lowers sizes (input dimensions,
// widths, the batch), plainer optimizers and no checkpoints, keeping each
// change that still fails, until a pass changes nothing.
func Shrink(s *Spec, fails func(*Spec) bool, budget int) *Spec {
	best := s.Clone()
	tries := 0
	try := func(c *Spec) bool {
		if tries >= budget {
			return false
		}
		c.Prune()
		if c.Infer() != nil || !c.valid() {
			return false
		}
		tries++
		if fails(c) {
			best = c
			return true
		}
		return false
	}
	for changed := true; changed && tries < budget; {
		changed = false
		// Whole loss terms first: the loss is a chain of adds.
		for {
			n := &best.Nodes[best.Loss.N]
			if n.Op != "add" || len(best.shapeOf(n.Args[0])) != 0 || len(best.shapeOf(n.Args[1])) != 0 {
				break
			}
			done := false
			for _, a := range n.Args {
				c := best.Clone()
				c.Loss = a
				if try(c) {
					changed, done = true, true
					break
				}
			}
			if !done {
				break
			}
		}
		// Nodes, last first: bypass, or replace by an input.
		for i := len(best.Nodes) - 1; i >= 0; i-- {
			if i >= len(best.Nodes) {
				continue
			}
			n := best.Nodes[i]
			if isSource(n.Op) || len(n.Out) != 1 {
				continue
			}
			for _, a := range n.Args {
				if best.shapeOf(a).Eq(n.Out[0]) && floatOp(best.Nodes[a.N].Op) {
					if try(best.bypass(i, a)) {
						changed = true
						break
					}
				}
			}
			if i < len(best.Nodes) && best.Nodes[i].Op == n.Op && floatOp(n.Op) {
				if try(best.asInput(i)) {
					changed = true
				}
			}
		}
		// Sizes.
		for _, c := range best.smaller() {
			if try(c) {
				changed = true
			}
		}
		// The simplest optimizer and no checkpoints.
		if best.Opt != (Opt{Kind: "sgd", LR: 0.1}) {
			c := best.Clone()
			c.Opt = Opt{Kind: "sgd", LR: 0.1}
			if try(c) {
				changed = true
			}
		}
		for i := range best.Nodes {
			if best.Nodes[i].Ckpt > 0 {
				c := best.Clone()
				for j := range c.Nodes {
					c.Nodes[j].Ckpt = 0
				}
				if try(c) {
					changed = true
				}
				break
			}
		}
	}
	best.Seed = 0
	best.Name = fmt.Sprintf("%s_min", s.Name)
	return best
}

// valid reports whether s has what a model needs: a parameter on the
// loss's path (a model with nothing to train does not compile).
func (s *Spec) valid() bool {
	for _, n := range s.Nodes {
		if contains(paramOps, n.Op) {
			return true
		}
	}
	return false
}

// bypass is s with node i's uses reading its operand a instead.
func (s *Spec) bypass(i int, a Ref) *Spec {
	c := s.Clone()
	c.replaceUses(Ref{i, 0}, a)
	return c
}

// asInput is s with node i replaced by an input of its result's shape.
func (s *Spec) asInput(i int) *Spec {
	c := s.Clone()
	n := &c.Nodes[i]
	*n = Node{Op: "input", Name: c.freshName("xs"), Ints: n.Out[0].Clone(), Out: n.Out, Ckpt: n.Ckpt}
	return c
}

// freshName is prefix and a number no node's name uses.
func (s *Spec) freshName(prefix string) string {
	for k := 1; ; k++ {
		name := fmt.Sprintf("%s%d", prefix, k)
		free := true
		for _, n := range s.Nodes {
			free = free && n.Name != name
		}
		if free {
			return name
		}
	}
}

func (s *Spec) replaceUses(from, to Ref) {
	for i := range s.Nodes {
		for j, a := range s.Nodes[i].Args {
			if a == from {
				s.Nodes[i].Args[j] = to
			}
		}
	}
	if s.Loss == from {
		s.Loss = to
	}
	if s.Output == from {
		s.Output = to
	}
}

// smaller lists copies of s with one size lowered: the batch, an input's
// dimension, a node's width (K) or a layer's first integer attribute.
func (s *Spec) smaller() []*Spec {
	var out []*Spec
	lower := func(v int) []int {
		var c []int
		for _, w := range []int{1, v / 2, v - 1} {
			if w >= 1 && w < v && !containsInt(c, w) {
				c = append(c, w)
			}
		}
		return c
	}
	for _, b := range lower(s.Batch) {
		c := s.Clone()
		c.Batch = b
		out = append(out, c)
	}
	for i, n := range s.Nodes {
		if isSource(n.Op) {
			for j, d := range n.Ints {
				for _, w := range lower(d) {
					c := s.Clone()
					c.Nodes[i].Ints[j] = w
					out = append(out, c)
				}
			}
		}
		for _, w := range lower(n.K) {
			c := s.Clone()
			c.Nodes[i].K = w
			out = append(out, c)
		}
		if contains([]string{"conv2d", "rnn", "lstm", "embedding", "encoder_layer", "decoder_layer", "decoder_only", "transformer"}, n.Op) && len(n.Ints) > 0 {
			for j := range n.Ints[:min(len(n.Ints), 2)] {
				for _, w := range lower(n.Ints[j]) {
					c := s.Clone()
					c.Nodes[i].Ints[j] = w
					out = append(out, c)
				}
			}
		}
	}
	return out
}

func containsInt(v []int, x int) bool {
	for _, y := range v {
		if y == x {
			return true
		}
	}
	return false
}
