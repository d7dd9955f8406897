package jit

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

func init() {
	type comp = struct {
		build func(b *irtest.Builder, attrs ir.Attrs, args []*ir.Value) *ir.Value
		uses  []string
	}
	uses := []string{"attention", "attention_bwd", "matmul", "add", "slice", "slice_bwd", "softmax", "softmax_bwd", "permute", "reshape", "scale"}
	// mha_self(x, in_w, in_b, out_w, out_b[, kpm]) and mha_cross(q, mem,
	// in_w, in_b, out_w, out_b[, kpm]): torch.nn.MultiheadAttention with
	// Attrs.Ints[0] heads, Attrs.Str "causal" for the causal mask.
	composites["mha_self"] = comp{func(b *irtest.Builder, a ir.Attrs, x []*ir.Value) *ir.Value {
		o := ops.MHAOptions{Heads: a.Ints[0], Causal: a.Str == "causal"}
		if len(x) > 5 {
			o.KeyPadding = x[5]
		}
		return ops.MultiheadAttention(b.Builder, x[0], x[0], x[0], x[1], x[2], x[3], x[4], o)
	}, uses}
	composites["mha_cross"] = comp{func(b *irtest.Builder, a ir.Attrs, x []*ir.Value) *ir.Value {
		o := ops.MHAOptions{Heads: a.Ints[0], Causal: a.Str == "causal"}
		if len(x) > 6 {
			o.KeyPadding = x[6]
		}
		return ops.MultiheadAttention(b.Builder, x[0], x[1], x[1], x[2], x[3], x[4], x[5], o)
	}, uses}
}

// attentionCases are torch.nn.MultiheadAttention at the odd sizes
// (d_model 12, 3 heads, target length 7, source length 5, batch 2):
// self-attention with and without the causal mask and key padding, and
// cross-attention from the target to the source with key padding
// (random: a row may be fully masked, whose defined output is out_proj's
// bias), and a head size of 40 (two query tiles of 32 in f32's kernel
// at length 37 would need more; here, tiles of 16 and a ragged last one).
func attentionCases() []opCase {
	const e, h, tq, tk, b = 12, 3, 7, 5, 2
	w := func(s ...int) opArg { return fd(fanIn, s...) }
	self := func(t int) []opArg { return []opArg{f(b, t, e), w(3*e, e), w(3 * e), w(e, e), w(e)} }
	cross := []opArg{f(b, tq, e), f(b, tk, e), w(3*e, e), w(3 * e), w(e, e), w(e)}
	heads := ir.Attrs{Ints: []int{h}}
	causal := ir.Attrs{Ints: []int{h}, Str: "causal"}
	return []opCase{
		{name: "mha_self_7", op: "mha_self", attrs: heads, args: self(tq)},
		{name: "mha_self_causal_7", op: "mha_self", attrs: causal, args: self(tq)},
		{name: "mha_self_padded_5", op: "mha_self", attrs: heads, args: append(self(tk), labels(2, b, tk))},
		{name: "mha_self_causal_padded_7", op: "mha_self", attrs: causal, args: append(self(tq), labels(2, b, tq))},
		{name: "mha_cross_7x5", op: "mha_cross", attrs: heads, args: cross},
		{name: "mha_cross_padded_7x5", op: "mha_cross", attrs: heads, args: append(append([]opArg(nil), cross...), labels(2, b, tk))},
		// Head size 40 (f32 tiles of 16 rows): three query and key tiles,
		// the last one ragged.
		{name: "mha_self_causal_h40_37", op: "mha_self", attrs: ir.Attrs{Ints: []int{2}, Str: "causal"}, args: []opArg{f(1, 37, 80), w(240, 80), w(240), w(80, 80), w(80)}},
	}
}

// TestFusedKernelsGPUBlocks runs the fused LayerNorm, softmax and
// attention kernels with the blocks a GPU launches (128 threads: four
// warps, butterflies, shared memory and barriers, cpu.Options.GPUBlocks)
// against PyTorch. TestOpsOracle runs them fused only with the CPU
// backend's one-thread blocks (its unfused runs expand LayerNorm and
// attention into primitives).
func TestFusedKernelsGPUBlocks(t *testing.T) {
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	dev, err := cpu.New(cpu.Options{GPUBlocks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	groups := opGroups()
	for gi, name := range []string{"attention", "norm"} {
		cases := groups[name]
		m, data, shapes, err := buildOpModel(ir.F32, cases, len(cases)-1, uint64(gi+1))
		if err != nil {
			t.Fatal(err)
		}
		var req []oracle.Case
		for _, c := range cases {
			req = append(req, oracleCase(c, "f32", data, shapes[c.name]))
		}
		want, err := oracle.Run(req)
		if err != nil {
			t.Fatal(err)
		}
		s := opSession(t, dev, m, true, data)
		got := runOps(t, s)
		s.Close()
		// f32, sums in another order than PyTorch's: as TestOpsOracle.
		const rtol, atol = 1e-4, 1e-5
		for i, c := range cases {
			closeTo(t, c.name+" forward", got.grads[c.gName()], want[i].Output.Data, rtol, atol)
			for j := range c.args {
				if c.args[j].classes == 0 {
					closeTo(t, c.name+" grad "+c.argName(j), got.grads[c.argName(j)], want[i].Grads[j].Data, rtol, atol)
				}
			}
		}
	}
}

// TestFullyMaskedRows pins down the defined result where every key of a
// query is masked (PyTorch gives NaN): softmax rows of zeros, attention
// output zero (so MultiheadAttention returns out_proj's bias), and no
// gradient through those rows. Fused (one-thread and GPU blocks) and
// unfused.
func TestFullyMaskedRows(t *testing.T) {
	for _, gpuBlocks := range []bool{false, true} {
		dev, err := cpu.New(cpu.Options{GPUBlocks: gpuBlocks})
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		for _, fuse := range []bool{true, false} {
			b := irtest.New()
			const e, tq, tk = 12, 4, 3
			x := b.Param("x", ir.F32, 1, 2, tq, e)
			mem := b.Param("mem", ir.F32, 1, 2, tk, e)
			kpm := b.Input("kpm", ir.I32, ir.D(2), ir.D(tk))
			p := func(name string, s ...int) *ir.Value { return b.Param(name, ir.F32, 0.3, s...) }
			outB := p("out_b", e)
			att := ops.MultiheadAttention(b.Builder, x, mem, mem, p("in_w", 3*e, e), p("in_b", 3*e), p("out_w", e, e), outB,
				ops.MHAOptions{Heads: 3, KeyPadding: kpm})
			sm := b.Op("softmax", ir.Attrs{Axes: []int{-1}}, b.Op("slice", ir.Attrs{Axes: []int{2}, Ints: []int{0, tk}}, mem), kpm)
			loss := b.Binary("add", b.Op("sum", ir.Attrs{}, b.Unary("square", att)), b.Op("sum", ir.Attrs{}, b.Unary("square", sm)))
			m := b.Model("masked", loss, att, ir.Optimizer{Kind: "sgd", LR: 0})
			data := opData{floats: map[string][]float64{}, labels: map[string][]int32{
				// Batch 0: every key masked; batch 1: key 1 masked.
				"kpm": {1, 1, 1, 0, 1, 0},
			}}
			rng := rand.New(rand.NewPCG(7, 7))
			for _, v := range m.Forward.Params() {
				data.floats[v.Name] = genValues(rng, int(v.Shape.Size().N), anySign, ir.F32)
			}
			s := opSession(t, dev, m, fuse, data)
			got := runOps(t, s)
			s.Close()
			what := fmt.Sprintf("gpuBlocks=%v fuse=%v", gpuBlocks, fuse)
			bias := data.floats["out_b"]
			for i := 0; i < tq; i++ { // batch 0: every row is the bias
				closeTo(t, what+" fully masked output row", got.out[i*e:(i+1)*e], bias, 0, 0)
			}
			if mismatch(got.out[tq*e:tq*e+e], bias, 0, 0) == "" {
				t.Errorf("%s: batch 1 output equals the bias", what)
			}
			// No gradient reaches batch 0's memory (every key masked):
			// neither through attention nor through the softmax.
			closeTo(t, what+" grad of fully masked memory", got.grads["mem"][:tk*e], make([]float64, tk*e), 0, 0)
			// Batch 1's softmax rows have one masked key: its column
			// gets nothing from the softmax either; the loss is finite.
			if math.IsNaN(got.loss) || math.IsInf(got.loss, 0) {
				t.Errorf("%s: loss %v", what, got.loss)
			}
		}
	}
}
