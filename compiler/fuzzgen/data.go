package fuzzgen

import (
	"math"
	"math/rand/v2"
)

// StepData is one training step's inputs: per input node name (without
// the spec's prefix), its values in row-major order; labels, token ids
// and masks as whole numbers.
type StepData map[string][]float64

// MakeData draws the inputs of steps training steps from s.Data: floats
// N(0, 1) (rounded to float32 for an f32 model), labels and ids uniform
// in [0, K), masks 0 or 1 (a "key0" mask keeps its first column 0).
func (s *Spec) MakeData(steps int) []StepData {
	rng := rand.New(rand.NewPCG(s.Data, 0x64617461))
	out := make([]StepData, steps)
	for k := range out {
		d := StepData{}
		for _, n := range s.Nodes {
			if !isSource(n.Op) || n.Op == "param" {
				continue
			}
			shape := Shape(n.Ints)
			v := make([]float64, shape.Elems(s.Batch))
			switch n.Op {
			case "input":
				for i := range v {
					v[i] = rng.NormFloat64()
					if s.DType == "f32" {
						v[i] = float64(float32(v[i]))
					}
				}
			case "labels", "tokens", "mask":
				for i := range v {
					v[i] = float64(rng.IntN(max(n.K, 1)))
				}
				if n.Str == "key0" {
					last := shape.Concrete(s.Batch)[len(shape)-1]
					for i := 0; i < len(v); i += last {
						v[i] = 0
					}
				}
			}
			d[n.Name] = v
		}
		out[k] = d
	}
	return out
}

func isSource(op string) bool {
	switch op {
	case "input", "labels", "tokens", "mask", "param":
		return true
	}
	return false
}

// philox is Philox4x32-10 as codegen/preamble.cuh's ngen_philox4 keys it:
// counter (ctr lo, ctr hi, stream, step lo), key (seed lo, seed hi ^ step
// hi).
func philox(seed, step uint64, stream uint32, ctr uint64) [4]uint32 {
	c0, c1, c2, c3 := uint32(ctr), uint32(ctr>>32), stream, uint32(step)
	k0, k1 := uint32(seed), uint32(seed>>32)^uint32(step>>32)
	for r := 0; r < 10; r++ {
		p0 := uint64(0xD2511F53) * uint64(c0)
		p1 := uint64(0xCD9E8D57) * uint64(c2)
		c0, c1, c2, c3 = uint32(p1>>32)^c1^k0, uint32(p1), uint32(p0>>32)^c3^k1, uint32(p0)
		k0 += 0x9E3779B9
		k1 += 0xBB67AE85
	}
	return [4]uint32{c0, c1, c2, c3}
}

// DropoutMask is the 0/1 keep mask, in row-major order, that a dropout of
// probability p on a value of shape s draws at optimizer step step from
// stream: element (o, b, j) around the batch axis b is drawn at index
// (b·O + o)·I + j (codegen's sampleIndex with row0 0), word idx&3 of
// Philox counter idx>>2, kept when its top 24 bits as a float are below
// 1-p in float32 (ngen_keep).
func DropoutMask(seed, step uint64, stream int, s Shape, batch int, p float64) []float64 {
	c := s.Concrete(batch)
	pos := -1
	for i, d := range s {
		if d == Batch {
			pos = i
			break
		}
	}
	outer, inner, b := 1, 1, 1
	if pos >= 0 {
		for _, d := range c[:pos] {
			outer *= d
		}
		for _, d := range c[pos+1:] {
			inner *= d
		}
		b = c[pos]
	}
	n := s.Elems(batch)
	m := make([]float64, n)
	keep := float32(1 - p)
	for i := range m {
		idx := uint64(i)
		if pos >= 0 {
			o, r := i/(b*inner), i%(b*inner)
			bi, j := r/inner, r%inner
			idx = uint64((bi*outer+o)*inner + j)
		}
		w := philox(seed, step, uint32(stream), idx>>2)[idx&3]
		if float32(w>>8)*5.9604644775390625e-08 < keep {
			m[i] = 1
		}
	}
	return m
}

// finite reports whether every value is finite.
func finite(vs []float64) bool {
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return false
		}
	}
	return true
}
