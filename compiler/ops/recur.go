package ops

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// Recurrences. A recurrence over time is one IR value, not T copies of its
// body: rnn_scan runs the whole loop over the T steps of a batch of
// sequences in one kernel (Kind Loop: a block per sequence carries the
// state in shared memory from step to step, so the generated code and the
// kernel count do not depend on T), and its gradient rnn_scan_bwd is the
// same loop in reverse (backpropagation through time).
//
// rnn_scan(xp [B,T,G·H], whh [G·H,H], h0 [B,H], c0 [B,H]) → S [B,T,W]
//
// xp is the input projection of every step (x·W_ihᵀ + b_ih + b_hh, one
// GEMM over all steps before the loop); per step the kernel adds the
// recurrent product W_hh·h and applies the cell (Attrs.Str):
//
//	rnn_tanh, rnn_relu  G 1, W H:  h = act(xp + W_hh h)          S = h
//	lstm                G 4, W 6H: gates i, f, g, o (PyTorch's order);
//	                    c = f c + i g, h = o tanh(c)    S = h, c, i, f, g, o
//
// An optional fifth operand, an i32 mask [B,T], marks the steps that hold
// a token: where it is 0 the state is carried over unchanged (padding then
// never changes the result), and backward passes the state's gradient
// through.
//
// S keeps, per step, the state and (LSTM) the gate activations: the
// residuals backward needs, one buffer with a time axis. h0 and c0 are
// the initial states (c0 unused by the RNN cells). Only the h and c parts
// of S may carry a gradient (the layer lowering slices those; a gradient
// on the gate part would be ignored).
//
// rnn_scan_bwd(gS, S, whh, h0, c0) → D [B,T+1,G·H]: rows 0..T-1 the
// gradients of the pre-activations of every step (= the gradient of xp),
// row T the gradients of h0 (first H) and, for the LSTM, c0 (next H). The
// gradient of W_hh is one GEMM over all steps after the loop: Σ_t
// dpreᵀ_t · h_{t-1}.

// Cell is a recurrent cell kind.
type Cell struct {
	Name  string
	Gates int // G
	Width int // W, in units of H
}

// Cells are the cells rnn_scan implements.
var Cells = map[string]Cell{
	"rnn_tanh": {"rnn_tanh", 1, 1},
	"rnn_relu": {"rnn_relu", 1, 1},
	"lstm":     {"lstm", 4, 6},
}

// scanDims checks rnn_scan's operands and returns its cell, B, T and H.
func scanDims(v *ir.Value, xp, whh, h0, c0 *ir.Value) (cell Cell, b ir.Dim, t, h int, err error) {
	cell, ok := Cells[v.Attrs.Str]
	if !ok {
		return cell, b, 0, 0, fmt.Errorf("unknown cell %q (rnn_tanh, rnn_relu or lstm)", v.Attrs.Str)
	}
	if len(whh.Shape) != 2 || whh.Shape[0].Sym != "" || whh.Shape[1].Sym != "" || whh.Shape[0].N != cell.Gates*whh.Shape[1].N {
		return cell, b, 0, 0, fmt.Errorf("recurrent weight %s must be [%d·H, H]", whh.Shape, cell.Gates)
	}
	h = whh.Shape[1].N
	if len(xp.Shape) != 3 || xp.Shape[1].Sym != "" || xp.Shape[2] != ir.D(cell.Gates*h) {
		return cell, b, 0, 0, fmt.Errorf("input projection %s must be [B, T, %d] with a static T", xp.Shape, cell.Gates*h)
	}
	b, t = xp.Shape[0], xp.Shape[1].N
	for _, s := range []*ir.Value{h0, c0} {
		if !s.Shape.Eq(ir.Shape{b, ir.D(h)}) {
			return cell, b, 0, 0, fmt.Errorf("initial state %s, want [%s, %d]", s.Shape, b, h)
		}
	}
	for _, a := range []*ir.Value{whh, h0, c0} {
		if a.DType != xp.DType || !a.DType.IsFloat() {
			return cell, b, 0, 0, fmt.Errorf("operands must share a float dtype, got %s and %s", xp.Type(), a.Type())
		}
	}
	return cell, b, t, h, nil
}

func scanInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	a := v.Args
	if len(a) != 4 && len(a) != 5 {
		return nil, 0, fmt.Errorf("rnn_scan takes 4 or 5 arguments, got %d", len(a))
	}
	cell, b, t, h, err := scanDims(v, a[0], a[1], a[2], a[3])
	if err != nil {
		return nil, 0, err
	}
	if err := checkMask(a, 4, b, t); err != nil {
		return nil, 0, err
	}
	return ir.Shape{b, ir.D(t), ir.D(cell.Width * h)}, a[0].DType, nil
}

// checkMask checks the optional step mask a[i]: i32 [B, T], 0 where a
// sequence has no token (its state is carried over unchanged).
func checkMask(a []*ir.Value, i int, b ir.Dim, t int) error {
	if len(a) <= i {
		return nil
	}
	if m := a[i]; m.DType != ir.I32 || !m.Shape.Eq(ir.Shape{b, ir.D(t)}) {
		return fmt.Errorf("step mask %s, want i32[%s,%d]", m.Type(), b, t)
	}
	return nil
}

func scanBwdInfer(v *ir.Value) (ir.Shape, ir.DType, error) {
	a := v.Args // gS, S, whh, h0, c0[, mask]
	if len(a) != 5 && len(a) != 6 {
		return nil, 0, fmt.Errorf("rnn_scan_bwd takes 5 or 6 arguments, got %d", len(a))
	}
	if err := checkMask(a, 5, a[1].Shape[0], a[1].Shape[1].N); err != nil {
		return nil, 0, err
	}
	cell, b, t, h, err := scanDims(v, &ir.Value{Shape: ir.Shape{a[1].Shape[0], a[1].Shape[1], ir.D(cell0(v) * a[2].Shape[1].N)}, DType: a[1].DType}, a[2], a[3], a[4])
	if err != nil {
		return nil, 0, err
	}
	want := ir.Shape{b, ir.D(t), ir.D(cell.Width * h)}
	if !a[0].Shape.Eq(want) || !a[1].Shape.Eq(want) {
		return nil, 0, fmt.Errorf("gradient %s and states %s, want %s", a[0].Shape, a[1].Shape, want)
	}
	return ir.Shape{b, ir.D(t + 1), ir.D(cell.Gates * h)}, a[1].DType, nil
}

// cell0 is the gate count of v's cell (1 for an unknown one, which
// scanDims then reports).
func cell0(v *ir.Value) int {
	if c, ok := Cells[v.Attrs.Str]; ok {
		return c.Gates
	}
	return 1
}

func scanGrad(b *Builder, v, g *ir.Value) []*ir.Value {
	xp, whh, h0, c0 := v.Args[0], v.Args[1], v.Args[2], v.Args[3]
	cell := Cells[v.Attrs.Str]
	B, T, H := xp.Shape[0], xp.Shape[1].N, whh.Shape[1].N
	bargs := []*ir.Value{g, v, whh, h0, c0}
	if len(v.Args) > 4 {
		bargs = append(bargs, v.Args[4])
	}
	d := b.Op("rnn_scan_bwd", ir.Attrs{Str: v.Attrs.Str}, bargs...)
	slice := func(x *ir.Value, axis, from, to int) *ir.Value {
		return b.Op("slice", ir.Attrs{Axes: []int{axis}, Ints: []int{from, to}}, x)
	}
	dpre := slice(d, 1, 0, T) // [B,T,G·H]: the gradient of xp
	last := b.Op("reshape", ir.Attrs{Shape: ir.Shape{B, ir.D(cell.Gates * H)}}, slice(d, 1, T, T+1))
	dh0 := slice(last, 1, 0, H)
	var dc0 *ir.Value
	if cell.Gates == 4 {
		dc0 = slice(last, 1, H, 2*H)
	}
	// h_{t-1} for every step: h0, then h_0..h_{T-2}. A zero h0 (no
	// initial state) adds nothing and is left out (a constant has no
	// storage for the concatenation to read).
	hs := slice(v, 2, 0, H)
	dp, hprev := dpre, (*ir.Value)(nil)
	switch {
	case h0.Op == "fill" && h0.Attrs.F == 0 && T == 1:
		return []*ir.Value{dpre, b.Op("fill", ir.Attrs{F: 0, Shape: whh.Shape.Clone(), Str: whh.DType.String()}), dh0, dc0, nil}
	case h0.Op == "fill" && h0.Attrs.F == 0:
		dp, hprev = slice(dpre, 1, 1, T), slice(hs, 1, 0, T-1)
	default:
		hprev = b.Op("reshape", ir.Attrs{Shape: ir.Shape{B, ir.D(1), ir.D(H)}}, h0)
		if T > 1 {
			hprev = b.Op("concat", ir.Attrs{Axes: []int{1}}, hprev, slice(hs, 1, 0, T-1))
		}
	}
	// One GEMM over all steps: dW_hh = Σ_{b,t} dpre[b,t]ᵀ h_{t-1}[b], a
	// batched product summed over the batch, which the GEMM accumulates.
	dw := b.Op("matmul", ir.Attrs{TransA: true}, dp, hprev) // [B, G·H, H]
	dwhh := b.SumTo(dw, whh.Shape)
	return []*ir.Value{dpre, dwhh, dh0, dc0, nil}
}

func init() {
	register(
		// 256 threads: eight warps share the forward's rows of W_hh, and
		// the backward's thread per hidden unit covers H = 256 at once.
		&Def{Name: "rnn_scan", Kind: Loop, NArgs: -1, Infer: scanInfer, Loop: scanFwdLoop, Grad: scanGrad, Flops: 1, LoopThreads: 256, Stepped: scanStepped(0)},
		&Def{Name: "rnn_scan_bwd", Kind: Loop, NArgs: -1, Infer: scanBwdInfer, Loop: scanBwdLoop, LoopThreads: 256, Stepped: scanStepped(1)},
	)
}

// ScanWork is the work of one time step of a recurrence (rnn_scan or
// rnn_scan_bwd) for one sequence: the step count T and the FLOPs of the
// recurrent product, W_hh·h forward and W_hhᵀ·dpre backward (2·G·H·H).
// ok is false for any other op.
func ScanWork(v *ir.Value) (T int, productFlops int64, ok bool) {
	var s, whh *ir.Value
	switch v.Op {
	case "rnn_scan":
		s, whh = v.Args[0], v.Args[1]
	case "rnn_scan_bwd":
		s, whh = v.Args[1], v.Args[2]
	default:
		return 0, 0, false
	}
	h := int64(whh.Shape[1].N)
	return s.Shape[1].N, 2 * int64(whh.Shape[0].N) * h, true
}
