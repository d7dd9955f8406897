package compiler

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

// The "recompute" pass and the budget's choice of segments. That the
// results stay bit for bit the same is tested by running the kernels
// (codegen/jit TestCheckpointBitForBit).

const ckLayers, ckWidth, ckBatch = 24, 256, 128

func TestRecompute(t *testing.T) {
	tensor := int64(ckBatch * ckWidth * 4) // one [B,width] f32 activation
	var plain int64
	for _, fuse := range []bool{true, false} {
		for _, seg := range []int{0, 1, 3, 5, 8} {
			p, err := Compile(irtest.DeepMLP(ir.F32, 32, ckWidth, ckLayers, 10, 0.1, irtest.Adam, seg), Options{Fuse: fuse, RefBatch: ckBatch})
			if err != nil {
				t.Fatal(err)
			}
			re := 0
			for _, v := range p.Step.Values {
				if v.Phase == "re" {
					re++
				}
				if v.Phase != "bwd" {
					continue
				}
				for _, a := range v.Args {
					if a.Checkpoint > 0 && a.Role == ir.Temp && a.Phase == "" {
						t.Fatalf("fuse=%v segment %d: backward %s reads checkpointed %s", fuse, seg, v.LongString(), a.LongString())
					}
				}
			}
			if (re > 0) != (seg > 0) || (seg > 0) != (p.Without != nil) {
				t.Fatalf("fuse=%v segment %d: %d recomputed values, without %v", fuse, seg, re, p.Without != nil)
			}
			act := p.ActivationBytes
			if seg == 0 {
				plain = act
				// Every layer keeps at least one activation for its backward.
				if act < ckLayers*tensor {
					t.Fatalf("fuse=%v: %d activation bytes without checkpoints, want >= %d", fuse, act, ckLayers*tensor)
				}
				continue
			}
			if p.Without.ActivationBytes != plain || p.PeakBytes > p.Without.PeakBytes {
				t.Fatalf("fuse=%v segment %d: without %d/%d, plain %d", fuse, seg, p.Without.ActivationBytes, p.Without.PeakBytes, plain)
			}
			// √L checkpointing: the segments' inputs (L/seg) plus one
			// segment's activations (2 per layer here: the ReLU's output
			// and the dropout's), and a few for the gradients in flight.
			bound := int64(ckLayers/seg+2*seg+4) * tensor
			if !fuse {
				bound = int64(ckLayers/seg+3*seg+8) * tensor // unfused layers keep the bias add apart too
			}
			t.Logf("fuse=%v segment %d: activations %d bytes (%.1f tensors), without %d (%.1f)", fuse, seg, act, float64(act)/float64(tensor), plain, float64(plain)/float64(tensor))
			if act > bound || act >= plain {
				t.Errorf("fuse=%v segment %d: %d activation bytes, want <= %d and < %d", fuse, seg, act, bound, plain)
			}
		}
	}
}

func TestMemoryBudget(t *testing.T) {
	m := func() *ir.Model { return irtest.DeepMLP(ir.F32, 32, ckWidth, ckLayers, 10, 0, irtest.Adam, 0) }
	plain, err := Compile(m(), Options{Fuse: true, RefBatch: ckBatch})
	if err != nil {
		t.Fatal(err)
	}
	ck, err := Compile(irtest.DeepMLP(ir.F32, 32, ckWidth, ckLayers, 10, 0, irtest.Adam, 5), Options{Fuse: true, RefBatch: ckBatch})
	if err != nil {
		t.Fatal(err)
	}
	// A budget the plain plan meets: nothing is recomputed.
	p, err := Compile(m(), Options{Fuse: true, RefBatch: ckBatch, MemoryBudget: plain.PeakBytes})
	if err != nil || p.Without != nil {
		t.Fatalf("budget at the plain peak: %v, checkpoints %v", err, p != nil && p.Without != nil)
	}
	// Halfway between the plain and the √L plan: some segments.
	budget := (plain.PeakBytes + ck.PeakBytes) / 2
	p, err = Compile(m(), Options{Fuse: true, RefBatch: ckBatch, MemoryBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	if p.PeakBytes > budget || p.Without == nil || p.Without.PeakBytes != plain.PeakBytes {
		t.Fatalf("budget %d: peak %d, without %v", budget, p.PeakBytes, p.Without != nil)
	}
	t.Logf("budget %d: peak %d (plain %d, every segment %d)", budget, p.PeakBytes, plain.PeakBytes, ck.PeakBytes)
	// Below what any choice reaches: a clear error.
	_, err = Compile(m(), Options{Fuse: true, RefBatch: ckBatch, MemoryBudget: plain.PeakBytes / 2})
	if err == nil || !strings.Contains(err.Error(), "-memory-budget") || !strings.Contains(err.Error(), "smallest plan") {
		t.Fatalf("budget too small: %v", err)
	}
}

// TestRecomputeLSTM: an 8-layer LSTM keeps each layer's per-step
// residuals for its backward; checkpointing the layers keeps their outputs
// only, and recomputes one layer's residuals at a time.
func TestRecomputeLSTM(t *testing.T) {
	const T, H, B = 35, 256, 64
	var plain int64
	for _, seg := range []int{0, 1, 2} {
		p, err := Compile(irtest.DeepLSTM(ir.F32, T, 64, H, 8, 10, seg), Options{Fuse: true, RefBatch: B})
		if err != nil {
			t.Fatal(err)
		}
		out := int64(B * T * H * 4) // one layer's output [B,T,H]
		t.Logf("segment %d: temporaries %d bytes (%.1f layer outputs), peak %d", seg, p.ActivationBytes, float64(p.ActivationBytes)/float64(out), p.PeakBytes)
		if seg == 0 {
			plain = p.ActivationBytes
			continue
		}
		if p.ActivationBytes*2 > plain {
			t.Errorf("segment %d: temporaries %d, without %d: want at most half", seg, p.ActivationBytes, plain)
		}
	}
	// A budget the plain plan (234.8 MB) misses: the compiler finds
	// segments of its own.
	p, err := Compile(irtest.DeepLSTM(ir.F32, T, 64, H, 8, 10, 0), Options{Fuse: true, RefBatch: B, MemoryBudget: 160 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if p.Without == nil || p.PeakBytes > 160<<20 {
		t.Fatalf("budget 160 MiB: peak %d, checkpoints %v", p.PeakBytes, p.Without != nil)
	}
}

func TestLayerOf(t *testing.T) {
	for in, want := range map[string]string{
		"fc1.weight": "fc1", "fc1.bias": "fc1", "w": "w", "conv.block.weight": "conv.block",
		"lstm.weight_ih_l0": "lstm_l0", "lstm.bias_hh_l12": "lstm_l12", "lstm.weight_hh_l1_reverse": "lstm_l1_reverse",
		"m.weight_lx": "m", "m.bias_l": "m",
	} {
		if got := layerOf(in); got != want {
			t.Errorf("layerOf(%q) = %q, want %q", in, got, want)
		}
	}
}
