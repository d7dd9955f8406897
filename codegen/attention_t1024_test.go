package codegen

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/dsl"
	tf "github.com/ngen-ml/ngen/models/transformer"
)

// scoreBytes is what attention kernels that store the score matrix would
// move for one training step, per the reference: every attention
// op's [B, H, Tq, Tk] f32 matrix written and read in the forward pass
// (scores, then weights) and written and read in the backward pass (their
// gradient): 4 · B·H·Tq·Tk · 4 bytes. It leaves out what both kinds of
// kernel move (q, k, v, the output and their gradients), so it is the
// least such kernels move beyond the fused ones.
func scoreBytes(p *compiler.Program, batch int) (n int64, ops_ int) {
	for _, g := range p.Groups[p.Step] {
		for _, v := range g.Values {
			if v.Op != "attention" {
				continue
			}
			h, tq, tk := v.Attrs.Ints[0], v.Args[0].Shape[1].N, v.Args[1].Shape[1].N
			n += 4 * int64(batch) * int64(h) * int64(tq) * int64(tk) * 4
			ops_++
		}
	}
	return n, ops_
}

// TestAttentionBytesAt1024 (issue 11's GPU target): the report's modeled
// global bytes of the fused attention kernels (attention and
// attention_bwd, fused with what their group holds) at T = 1024 against
// scoreBytes. The flash kernels move O(T·E) per step: reading q, k, v
// (3E), O and dO (2E) and writing O and dq, dk, dv (4E), about 12·E·T·B·4
// bytes per attention, so their share of scoreBytes is about 3·dh/T. For
// the causal attention model of attention_report_test.go (dh 16) that is
// under 5%, and the test wants < 10%. For the seed models (dh 64) the
// floor is 3·64/1024 ≈ 19%: the 10% holds there only from
// T = 2048 for the GPT (see the log), and the test wants that. The
// TransformerLM's cross-attention backward is two kernels (dq for the
// decoder, dk and dv for the memory), each reading q, k, v, O and dO,
// so its share is higher (21% at T = 1024). The test wants every share
// within 1.25 × 3·dh/T, which a T×T term in the report would exceed
// many times.
//
// It also checks that the -gpu model charges the attention kernels their
// FLOPs (ops.AttentionFlops): at T = 1024 they are compute-bound, and a
// model that saw only their bytes would put them 6× too fast.
func TestAttentionBytesAt1024(t *testing.T) {
	const T, batch = 1024, 4
	// The causal attention model (heads 2, dh 16).
	fused := attentionBytes(t, T, true)
	ref := int64(4 * batch * 2 * T * T * 4)
	if r := float64(fused) / float64(ref); r >= 0.10 {
		t.Errorf("attention model, T=%d: fused attention moves %d bytes, %.1f%% of the %d a score-matrix kernel would; want < 10%%", T, fused, 100*r, ref)
	} else {
		t.Logf("attention model (dh 16), T=%d: fused %d bytes = %.1f%% of score-matrix traffic %d", T, fused, 100*r, ref)
	}
	for _, c := range []tf.Config{tf.GPTConfig(), tf.LMConfig()} {
		for _, seq := range []int{1024, 2048} {
			c.SeqLen, c.MaxLen = seq, seq
			build := tf.NewGPT
			if c.Name == "transformer" {
				build = tf.NewTransformerLM
			}
			p := compileDSL(t, build(c), batch)
			r := h100Report(t, p)
			var bytes, flops int64
			var us float64
			kernels := 0
			for _, s := range r.Steps {
				if s.Kind == "launch" && strings.Contains(s.Ops, "attention") {
					bytes += s.Bytes
					flops += s.Flops
					us += s.GPUUs
					kernels++
				}
			}
			ref, n := scoreBytes(p, batch)
			if n == 0 || kernels < 2*n {
				t.Fatalf("%s T=%d: %d attention ops, %d attention kernels in the report", c.Name, seq, n, kernels)
			}
			dh := c.DModel / c.Heads
			share, floor := float64(bytes)/float64(ref), 3*float64(dh)/float64(seq)
			t.Logf("%s T=%d batch %d: fused attention %d bytes = %.1f%% of score-matrix traffic %d (floor 3·dh/T = %.1f%%); H100 model %.0f µs of a %.0f µs step",
				c.Name, seq, batch, bytes, 100*share, ref, 100*floor, us, r.GPUModelUs)
			if share > 1.25*floor {
				t.Errorf("%s T=%d: fused attention bytes %.1f%% of score-matrix traffic, want ≤ 1.25 × 3·dh/T = %.1f%%", c.Name, seq, 100*share, 125*floor)
			}
			if c.Name == "gpt" && seq == 2048 && share >= 0.10 {
				t.Errorf("%s T=%d: fused attention bytes %.1f%% of score-matrix traffic, want < 10%%", c.Name, seq, 100*share)
			}
			// FLOPs: 4·dh per visible pair forward, 14·dh backward
			// (self-attention; the source plays q, k and v).
			if flops == 0 {
				t.Errorf("%s T=%d: the attention kernels report no FLOPs", c.Name, seq)
			}
			if us < float64(flops)/GPUs["h100"].FP32*1e6 {
				t.Errorf("%s T=%d: modeled %.0f µs is below the FLOP time %.0f µs", c.Name, seq, us, float64(flops)/GPUs["h100"].FP32*1e6)
			}
		}
	}
}

func compileDSL(t *testing.T, m *dsl.Model, batch int) *compiler.Program {
	t.Helper()
	im, err := m.Build()
	if err != nil {
		t.Fatal(err)
	}
	p, err := compiler.Compile(im, compiler.Options{Fuse: true, RefBatch: batch})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAttentionFlops pins ops.AttentionFlops on the causal GPT block:
// forward 4·dh·H per visible pair, backward 14·dh·H.
func TestAttentionFlops(t *testing.T) {
	c := tf.GPTConfig()
	c.SeqLen, c.DecLayers = 8, 1
	p := compileDSL(t, tf.NewGPT(c), 1)
	pairs := int64(8 * 9 / 2)
	want := map[string]int64{"attention": 4 * 64 * 4 * pairs, "attention_bwd": 14 * 64 * 4 * pairs}
	seen := 0
	for _, g := range p.Groups[p.Step] {
		for _, v := range g.Values {
			if f, ok := ops.AttentionFlops(v); ok {
				seen++
				if f != want[v.Op] {
					t.Errorf("%s: %d FLOPs per sample, want %d", v.Op, f, want[v.Op])
				}
			}
		}
	}
	if seen != 2 {
		t.Errorf("%d attention ops in the step, want 2", seen)
	}
}

// scoreKernelBytes is what the unfused plan's attention moves at the
// report's batch: the global bytes of every step of its training step
// (launch or GEMM) that reads or writes a score-shaped tensor, rank 4
// [B, H, Tq, Tk] (scores, softmax weights, their dropout, and the
// gradients of each). That is ngen's own attention from primitive ops
// (-fuse=none, ops' attentionExpand), which stores the score matrix, as
// the same report models it; it includes what those steps also move of
// q, k, v and the output, as a framework's attention would. tq and tk
// are every attention's query and key lengths (the seed models at
// SeqLen have both equal), and dh rules out the per-head views of q, k
// and v ([B, H, T, dh]).
func scoreKernelBytes(t *testing.T, p *compiler.Program, r *Report, heads, tq, tk int) (int64, int) {
	t.Helper()
	scoreShaped := func(v *ir.Value) bool {
		s := v.Shape
		return len(s) == 4 && s[1].N == heads && s[2].N == tq && s[3].N == tk
	}
	touches := map[int]bool{}
	for _, g := range p.Groups[p.Step] {
		for _, v := range g.Values {
			hit := scoreShaped(v)
			for _, a := range v.Args {
				hit = hit || scoreShaped(a)
			}
			if hit {
				touches[g.Step] = true
			}
		}
	}
	var n int64
	for i, s := range r.Steps {
		if touches[i] {
			n += s.Bytes
		}
	}
	return n, len(touches)
}

// TestAttentionBytesVsUnfusedAt1024 is issue 11's GPU target measured
// against the kernels that store the score matrix: at T = 1024 the fused
// attention kernels of both seed models move under 10% of the global
// bytes that the unfused plan's attention (scoreKernelBytes) moves for
// the same training step, in the same report. TestAttentionBytesAt1024
// compares the same fused bytes with the least any score-storing kernel
// could move (4 passes over the matrix), against which head size 64
// cannot reach 10% at T = 1024.
func TestAttentionBytesVsUnfusedAt1024(t *testing.T) {
	const T, batch = 1024, 4
	for _, c := range []tf.Config{tf.GPTConfig(), tf.LMConfig()} {
		c.SeqLen, c.MaxLen = T, T
		build := tf.NewGPT
		if c.Name == "transformer" {
			build = tf.NewTransformerLM
		}
		var fused, unfused int64
		var nFused, nUnfused int
		for _, fuse := range []bool{true, false} {
			im, err := build(c).Build()
			if err != nil {
				t.Fatal(err)
			}
			p, err := compiler.Compile(im, compiler.Options{Fuse: fuse, RefBatch: batch})
			if err != nil {
				t.Fatal(err)
			}
			r, err := MakeReport(p)
			if err != nil {
				t.Fatal(err)
			}
			if fuse {
				for _, s := range r.Steps {
					if s.Kind == "launch" && strings.Contains(s.Ops, "attention") {
						fused += s.Bytes
						nFused++
					}
				}
				continue
			}
			unfused, nUnfused = scoreKernelBytes(t, p, r, c.Heads, T, T)
		}
		if nFused == 0 || nUnfused == 0 {
			t.Fatalf("%s T=%d: %d fused attention kernels, %d unfused steps on the score matrix", c.Name, T, nFused, nUnfused)
		}
		share := float64(fused) / float64(unfused)
		t.Logf("%s T=%d batch %d: fused attention %d bytes in %d kernels = %.1f%% of the unfused plan's %d bytes in %d steps on the score matrix",
			c.Name, T, batch, fused, nFused, 100*share, unfused, nUnfused)
		if share >= 0.10 {
			t.Errorf("%s T=%d: fused attention moves %.1f%% of the unfused attention's bytes, want < 10%%", c.Name, T, 100*share)
		}
	}
}
