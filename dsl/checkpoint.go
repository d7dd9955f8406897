package dsl

// Checkpoint declares body's ops as one checkpointed segment and returns
// body's result: the training step does not keep the segment's
// activations for the backward pass, it recomputes them there from the
// segment's inputs (gradient checkpointing, as torch.utils.checkpoint).
// Results are unchanged; memory falls and the recomputation costs about one
// more forward pass of the segment. Dropout inside draws the same masks
// when recomputed. Nested segments stay separate. Leave out the last layers
// before the loss: their backward follows at once, so recomputing them saves
// nothing.
//
//	h = m.Checkpoint(func() *dsl.Tensor {
//		h := dsl.ReLU(m.Linear("fc1", h, 512))
//		return dsl.ReLU(m.Linear("fc2", h, 512))
//	})
//
// `ngen build -memory-budget BYTES` chooses segments itself instead.
func (m *Model) Checkpoint(body func() *Tensor) *Tensor {
	pos := callerPos()
	if body == nil {
		m.fail(pos, "checkpoint", "nil function")
		return m.errTensor(nil)
	}
	f := m.m.Forward
	id, start := 1, len(f.Values)
	for _, v := range f.Values {
		id = max(id, v.Checkpoint+1)
	}
	out := body()
	if zero(out) {
		m.fail(pos, "checkpoint", "the function returned nil")
		return m.errTensor(nil)
	}
	if out.m != m {
		m.fail(pos, "checkpoint", "the function returned a tensor of another model")
		return m.errTensor(nil)
	}
	for _, v := range f.Values[start:] {
		if v.Checkpoint == 0 {
			v.Checkpoint = id
		}
	}
	return out
}
