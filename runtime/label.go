package runtime

import "strings"

// StepLabel names one device call of a plan for people: the profile
// table, the Chrome trace (WriteTrace) and the graph picture (ngen graph)
// all name a call through it, so they agree.
//
// A launch is named by its own label (Step.Label, the layer and ops it
// computes, for example blocks_0_norm1_layernorm_fwd): its kernel may be
// shared by every layer, so the kernel's name does not say which layer
// launched it. Plans without labels fall back to the kernel's name.
//
// A GEMM is named by the parameter it reads or the gradient it writes
// (gemm fc1.weight, gemm grad fc1.weight); a memset or copy by its
// destination.
func StepLabel(p *Plan, st *Step) string {
	switch st.Kind {
	case LaunchStep:
		if st.Label != "" {
			return st.Label
		}
		if st.Kernel >= 0 && st.Kernel < len(p.Kernels) {
			return p.Kernels[st.Kernel].Name
		}
		if st.Builtin != "" {
			return st.Builtin
		}
		return "launch"
	case GemmStep:
		return gemmLabel(p, &st.Gemm)
	case MemsetStep:
		return "memset " + bufferName(p, st.Buf)
	case CopyStep:
		return "copy " + bufferName(p, st.Buf)
	}
	return "?"
}

// gemmLabel says which layer a GEMM belongs to: the gradient it writes,
// else the parameter it reads, else the bare "gemm".
func gemmLabel(p *Plan, g *Gemm) string {
	if b := buffer(p, g.C); b != nil && b.Role == "grad" {
		return "gemm grad " + b.Name
	}
	for _, i := range []int{g.B, g.A} {
		if b := buffer(p, i); b != nil && b.Role == "param" {
			return "gemm " + b.Name
		}
	}
	return "gemm"
}

// buffer is buffer i, or for a view (a reshaped parameter) the buffer
// it views.
func buffer(p *Plan, i int) *Buffer {
	for range len(p.Buffers) {
		if i < 0 || i >= len(p.Buffers) {
			return nil
		}
		b := &p.Buffers[i]
		if b.Role != "view" || b.Placement != Alias {
			return b
		}
		i = b.AliasOf
	}
	return nil
}

// bufferName is a buffer's name without the function prefix temporaries
// carry (step.v12 → v12).
func bufferName(p *Plan, i int) string {
	b := buffer(p, i)
	if b == nil {
		return "?"
	}
	if j := strings.IndexByte(b.Name, '.'); j > 0 && b.Role == "temp" {
		return b.Name[j+1:]
	}
	return b.Name
}
