package compiler

import "github.com/ngen-ml/ngen/compiler/ir"

// poolFirst moves max pooling ahead of the ReLU and per-channel bias add
// that feed it: maxpool(relu(y + b)) = relu(maxpool(y) + b), exactly in
// floating point, since adding a constant and ReLU are both monotone and
// the bias is constant over a window (it varies only by channel). The
// epilogue then runs on the pooled tensor, a quarter of the elements for a
// 2×2 window, and the pooling reads the GEMM's output directly, so the
// full-size activation is never written; backward, the ReLU mask is read
// at the pooled size. Where every element of a window is at most -b, the
// original picks the window's first offset (all are 0 after the ReLU) and
// the rewrite its maximum: the forward values are the same (0) and the
// ReLU's gradient is zero either way.
//
// Only where the pre-activation is a GEMM's result (a convolution's):
// there the moved epilogue would otherwise write the full-size activation.
// Only the forward function is rewritten, before autodiff and the derived
// functions exist, and only when the ReLU and the add have no other use.
// The model is copied first: a compile must not change the model it was
// given, which the caller may compile again (unfused, say).
//
// Not under mixed precision: there the ReLU's input is rounded to 16 bits
// after the bias add, so two window elements that differ before the add
// may tie after it, and the original's argmax (the first of the tied)
// and the rewrite's (the larger before the add) route the gradient to
// different pixels. -fuse=none does not rewrite, and the fused plan must
// compute what it does bit for bit (docs/AMP.md).
func poolFirst(p *Program) error {
	f := p.Model.Forward
	if p.Model.Precision != nil || !anyPoolFirst(p.Model) {
		return nil
	}
	g, m := f.Clone(f.Name)
	mc := *p.Model
	mc.Forward, mc.Loss, mc.Output = g, m[p.Model.Loss], m[p.Model.Output]
	p.Model = &mc
	uses, kept := g.Uses(), results(&mc)
	dead := map[*ir.Value]bool{}
	var out []*ir.Value
	for _, v := range g.Values {
		y, bias, ok := poolOfReLU(v, uses, kept)
		if !ok {
			out = append(out, v)
			continue
		}
		// The ReLU, and the add when it goes into the rewrite, have no
		// other use: both die.
		r := v.Args[0]
		dead[r] = true
		if bias != nil {
			dead[r.Args[0]] = true
		}
		am := v.Args[1]
		am.Args = []*ir.Value{y} // maxpool_argmax(y), computed earlier in the list
		pick := &ir.Value{Op: "maxpool_pick", Args: []*ir.Value{y, am}, Shape: v.Shape.Clone(), DType: v.DType,
			Attrs: ir.Attrs{Ints: append([]int(nil), v.Attrs.Ints...)}, Pos: v.Pos, Phase: v.Phase}
		out = append(out, pick)
		act := pick
		if bias != nil {
			act = &ir.Value{Op: "add", Args: []*ir.Value{pick, bias}, Shape: v.Shape.Clone(), DType: v.DType, Pos: v.Args[0].Args[0].Pos, Phase: v.Phase}
			out = append(out, act)
		}
		// v keeps its identity for its users and becomes the ReLU.
		v.Op, v.Args, v.Attrs = "relu", []*ir.Value{act}, ir.Attrs{}
		out = append(out, v)
	}
	dropValues(g, out, dead)
	return nil
}

func anyPoolFirst(m *ir.Model) bool {
	uses, kept := m.Forward.Uses(), results(m)
	for _, v := range m.Forward.Values {
		if _, _, ok := poolOfReLU(v, uses, kept); ok {
			return true
		}
	}
	return false
}

// poolOfReLU matches v = maxpool_pick(r, maxpool_argmax(r)) with r =
// relu(z), z = y + b or r = relu(y), where r and z have no other uses and
// are not results (kept), y
// is a GEMM's result and b is constant over each window (shape [C,1,1] or
// [1,C,1,1] against [N,C,H,W]). It returns y and b (nil without the add).
func poolOfReLU(v *ir.Value, uses map[*ir.Value][]*ir.Value, kept map[*ir.Value]bool) (y, b *ir.Value, ok bool) {
	if v.Op != "maxpool_pick" || len(v.Args) != 2 {
		return nil, nil, false
	}
	r, am := v.Args[0], v.Args[1]
	if am.Op != "maxpool_argmax" || len(am.Args) != 1 || am.Args[0] != r || len(uses[am]) != 1 {
		return nil, nil, false
	}
	if r.Op != "relu" || len(uses[r]) != 2 || kept[r] {
		return nil, nil, false
	}
	z := r.Args[0]
	if fromGEMM(z) {
		return z, nil, true
	}
	if z.Op != "add" || len(uses[z]) != 1 || kept[z] {
		return nil, nil, false
	}
	for i, a := range z.Args {
		o := z.Args[1-i]
		if a.Shape.Eq(z.Shape) && a.DType == z.DType && perChannel(o.Shape, z.Shape) && fromGEMM(a) {
			return a, o, true
		}
	}
	return nil, nil, false
}

// fromGEMM reports whether v is a GEMM's result, seen through views. Only
// then does the rewrite pay: the epilogue it moves would otherwise write
// the full-size activation after the GEMM. After an elementwise producer
// (batch norm's affine), the ReLU and bias fuse into that producer's
// kernel at no cost, and splitting them off costs kernels.
func fromGEMM(v *ir.Value) bool {
	for v.Op == "reshape" || v.Op == "flat" {
		if len(v.Args) != 1 {
			return false
		}
		v = v.Args[0]
	}
	return v.Op == "matmul"
}

// perChannel reports whether a value of shape b, broadcast against the
// image shape x ([N, C, H, W]), varies at most along C.
func perChannel(b, x ir.Shape) bool {
	if len(x) != 4 || len(b) > 4 {
		return false
	}
	pad := padShape(b, 4)
	return pad[0] == ir.D(1) && pad[2] == ir.D(1) && pad[3] == ir.D(1) && (pad[1] == ir.D(1) || pad[1] == x[1])
}

// padShape left-pads s with 1s to n dimensions.
func padShape(s ir.Shape, n int) ir.Shape {
	out := make(ir.Shape, 0, n)
	for range n - len(s) {
		out = append(out, ir.D(1))
	}
	return append(out, s...)
}

// results are the forward values the model's caller reads, which a
// rewrite must keep: the loss, the output and what state updates write.
func results(m *ir.Model) map[*ir.Value]bool {
	r := map[*ir.Value]bool{m.Loss: true, m.Output: true}
	for _, o := range m.Forward.Outputs {
		r[o] = true
	}
	for _, u := range m.Forward.Updates {
		r[u.New], r[u.State] = true, true
	}
	return r
}
