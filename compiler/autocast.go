package compiler

import (
	"fmt"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// autocast applies the model's mixed-precision policy (ir.Model.Precision,
// dsl.AMP) to the forward function, the way torch.autocast decides an
// op's dtype, by inserting "cast" ops; autodiff then gives every gradient
// its value's dtype, and a cast's gradient is the cast back, so the
// backward pass follows.
//
//   - GEMMs (matmul) take their float operands in the half type H and
//     produce H: the product accumulates in f32 and rounds once
//     (autocast's lower-precision list; cublasGemmEx with
//     CUBLAS_COMPUTE_32F on the GPU).
//   - An elementwise op computes in float and stores its result in the
//     widest type of its float operands (PyTorch's type promotion), except
//     that an add of an H GEMM result and a parameter takes the parameter
//     in H: Linear's bias, which autocast casts with the weight (addmm).
//   - Every other op (reductions, cross-entropy, softmax, LayerNorm,
//     gathers, views' consumers) takes f32: H operands are widened
//     (autocast's f32 list, and the conservative choice for the rest).
//   - Convolutions (im2col and its GEMM) run in H and pooling keeps its
//     input's type (autocast_conv.go).
//   - Attention (the fused op) takes q, k and v in H and produces H
//     (autocast_attention.go); -fuse=none's expansion of it gets the
//     policy op by op: H batched GEMMs, an f32 softmax.
//   - Ops that only move elements (slice, permute, concat, slice_bwd)
//     keep their operand's type, as PyTorch's views and copies do.
//   - Recurrences (rnn_scan) run in f32 with their input projection
//     (the matmul and bias adds that feed the scan), as torch.autocast on
//     the CPU runs nn.RNN and nn.LSTM: neither is on its CPU
//     lower-precision list, so the whole layer, input GEMM included, stays
//     f32 and a half input is widened first. (CUDA's autocast runs
//     cuDNN's RNN in f16; ngen keeps one policy for both backends.)
//
// Parameters, state, inputs, the optimizer and every value the caller
// reads (loss, outputs, state updates) stay f32: the pass casts an H
// result back before it leaves the function.
func autocast(p *Program) error {
	pr := p.Model.Precision
	if pr == nil {
		return nil
	}
	h := pr.Type
	if h != ir.BF16 && h != ir.F16 {
		return fmt.Errorf("precision (%s): mixed precision in %s: want bf16 or f16", pr.Where(), h)
	}
	f := p.Model.Forward
	if err := convDTypes(f, pr); err != nil {
		return err
	}
	for _, v := range f.Values {
		// f64 values that an f32 model computes inside (BatchNorm2d's
		// statistics, cast from f32) are no f64 model.
		if d := ops.Lookup(v.Op); v.DType == ir.F64 && (d == nil || d.Kind == ops.Source) {
			return fmt.Errorf("precision (%s): mixed precision needs an f32 model, %s at %s is %s", pr.Where(), v.Op, v.Pos, v.Type())
		}
	}
	g, m := f.Clone(f.Name)
	mc := *p.Model
	mc.Forward, mc.Loss, mc.Output = g, m[p.Model.Loss], m[p.Model.Output]
	p.Model = &mc
	old := g.Values
	uses := g.Uses()
	g.Values = nil
	b := &ops.Builder{F: g}
	// casts keeps one cast per (value, dtype), so a value read by several
	// f32 ops is widened once.
	type key struct {
		v  *ir.Value
		dt ir.DType
	}
	casts := map[key]*ir.Value{}
	cast := func(v *ir.Value, dt ir.DType) *ir.Value {
		if v.DType == dt || !v.DType.IsFloat() {
			return v
		}
		if c, ok := casts[key{v, dt}]; ok {
			return c
		}
		b.Pos = v.Pos
		c := b.Op("cast", ir.Attrs{Str: dt.String()}, v)
		c.Checkpoint = v.Checkpoint
		casts[key{v, dt}] = c
		return c
	}
	// narrowed maps a value autocast stores in H after computing it in
	// f32 (batch norm's output, autocast_conv.go) to its H copy, which
	// every later op reads.
	narrowed := map[*ir.Value]*ir.Value{}
	recur := recurrentInternals(old)
	for _, v := range old {
		d := ops.Lookup(v.Op)
		if d == nil {
			return fmt.Errorf("%s (%s): unknown op", v.Op, v.Pos)
		}
		for i, a := range v.Args {
			if n, ok := narrowed[a]; ok {
				v.Args[i] = n
			}
		}
		switch {
		case d.Kind == ops.Source:
		case wideInternal(v):
			// BatchNorm2d's statistics in f64 (and their casts to and
			// from f32) keep their types: autocast computes them in
			// f32 or wider.
		case v.Op == "attention":
			castAttention(v, h, cast)
		case movesData(v):
			castMoved(v, h, cast)
		case recur[v]:
			castArgs(v, ir.F32, cast)
		case v.Op == "im2col": // a convolution's columns (autocast_conv.go)
			castArgs(v, h, cast)
		case convKeepsType(v.Op):
		case d.Kind == ops.MatMul:
			castBeforeBroadcast(v, h, b, cast, uses)
			castArgs(v, h, cast)
		case d.Kind == ops.View:
		case d.Kind == ops.Elementwise:
			// Constants and run-time scalars are weak, as Python
			// numbers are in PyTorch: they take the other operands' type.
			to, half := ir.DType(-1), false
			for _, a := range v.Args {
				switch {
				case !a.DType.IsFloat():
				case a.DType == h:
					half = true
				case a.Op != "fill" && a.Role != ir.Scalar:
					to = ir.F32
				}
			}
			if to < 0 && half {
				to = h
			}
			if to == ir.F32 && v.Op == "add" && len(v.Args) == 2 && (biasOfGemm(v.Args, h) || biasOfConv(v.Args, h)) {
				to = h
			}
			if to >= 0 {
				castArgs(v, to, cast)
			}
		default:
			castArgs(v, ir.F32, cast)
		}
		if d.Kind != ops.Source {
			shape, dt, err := ops.Infer(v)
			if err != nil {
				return fmt.Errorf("%s (%s): %v", v.Op, v.Pos, err)
			}
			v.Shape, v.DType = shape, dt
		}
		g.Values = append(g.Values, v)
		if batchNormOutput(v, h) {
			narrowed[v] = cast(v, h)
		}
	}
	if b.Err != nil {
		return b.Err
	}
	// What leaves the function is f32.
	mc.Loss = cast(mc.Loss, ir.F32)
	if o := mc.Output; o != nil {
		mc.Output = cast(o, ir.F32)
	}
	for name, o := range g.Outputs {
		g.Outputs[name] = cast(o, ir.F32)
	}
	for i, u := range g.Updates {
		g.Updates[i].New = cast(u.New, u.State.DType)
	}
	if b.Err != nil {
		return b.Err
	}
	g.Renumber()
	return nil
}

// castBeforeBroadcast casts a GEMM operand that broadcasts a smaller
// float value (a grouped convolution's weight over the batch,
// BatchMatMul's expansion), and that nothing else reads, before the
// broadcast rather than after: the same bits, since a broadcast copies,
// but the cast reads the small tensor (a [Co/G·G, K] weight rather than
// [B, G, Co/G, K]) and the broadcast stores 16-bit elements. The wide
// broadcast is left unread (prune drops it).
func castBeforeBroadcast(v *ir.Value, h ir.DType, b *ops.Builder, cast func(*ir.Value, ir.DType) *ir.Value, uses map[*ir.Value][]*ir.Value) {
	for i, a := range v.Args {
		if a.Op != "broadcast" || !a.DType.IsFloat() || a.DType == h || len(uses[a]) != 1 {
			continue
		}
		x := cast(a.Args[0], h)
		b.Pos = a.Pos
		nb := b.Op("broadcast", ir.Attrs{Shape: a.Attrs.Shape.Clone()}, x)
		nb.Checkpoint = a.Checkpoint
		v.Args[i] = nb
	}
}

// recurrentInternals marks every recurrence (rnn_scan) and its input
// projection: the bias adds that feed the scan's first argument and the
// matmul under them (ops.MaskedRecurrent's x·W_ihᵀ + b_ih + b_hh), which
// autocast keeps in f32.
func recurrentInternals(vs []*ir.Value) map[*ir.Value]bool {
	in := map[*ir.Value]bool{}
	for _, v := range vs {
		if v.Op != "rnn_scan" {
			continue
		}
		in[v] = true
		a := v.Args[0]
		for a.Op == "add" && len(a.Args) == 2 && a.Args[1].Role == ir.Param {
			in[a] = true
			a = a.Args[0]
		}
		if a.Op == "matmul" {
			in[a] = true
		}
	}
	return in
}

// castArgs replaces v's float arguments by their casts to dt.
func castArgs(v *ir.Value, dt ir.DType, cast func(*ir.Value, ir.DType) *ir.Value) {
	for i, a := range v.Args {
		if a.DType.IsFloat() {
			v.Args[i] = cast(a, dt)
		}
	}
}

// biasOfGemm reports whether args are an H GEMM result (or a view of one)
// and a parameter: Linear's bias add.
func biasOfGemm(args []*ir.Value, h ir.DType) bool {
	gemm := func(v *ir.Value) bool {
		for v.Op == "reshape" || v.Op == "flat" {
			v = v.Args[0]
		}
		return v.Op == "matmul" && v.DType == h
	}
	return gemm(args[0]) && args[1].Role == ir.Param || gemm(args[1]) && args[0].Role == ir.Param
}

// wideInternal reports whether v is part of an f32 model's f64
// arithmetic (BatchNorm2d's statistics): an f64 value or an op on one.
func wideInternal(v *ir.Value) bool {
	if v.DType == ir.F64 {
		return true
	}
	for _, a := range v.Args {
		if a.DType == ir.F64 {
			return true
		}
	}
	return false
}
