package compiler

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

// TestAutocastConv checks the dtypes autocast gives the seed ConvNet, with
// and without batch norm, in bf16 and f16: the convolutions' columns,
// GEMMs, bias adds, ReLUs and max pooling in the half type, batch norm's
// statistics and affine in f32 with its output stored in the half type,
// and, after the whole pipeline, f32 gradients of the f32 weights,
// every GEMM in the half type, each convolution's weight gradient a
// per-sample half product summed by a reduction (no summed GEMM), and
// max pooling left after the ReLU (no "pool first" rewrite).
func TestAutocastConv(t *testing.T) {
	for _, h := range []ir.DType{ir.BF16, ir.F16} {
		for _, bn := range []bool{false, true} {
			m := withPrecision(irtest.SeedConvNet(1, 11, 9, 3, 5, 7, 4, bn, irtest.Adam), h)
			p := &Program{Model: m}
			if err := autocast(p); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range p.Model.Forward.Values {
				switch v.Op {
				case "im2col", "matmul", "relu", "maxpool_argmax", "maxpool_pick", "cross_entropy":
					got = append(got, v.Op+" "+v.Type())
				case "add":
					if len(v.Shape) == 4 { // a convolution's bias, or batch norm's shift
						got = append(got, v.Op+" "+v.Type())
					}
				case "mean":
					got = append(got, v.Op+" "+v.Type())
				case "cast":
					if v.DType.IsHalf() && v.Args[0].Op == "add" { // batch norm's output
						got = append(got, v.Op+" "+v.Type())
					}
				}
			}
			want := []string{
				"im2col bf16[B,9,99]", "matmul bf16[B,3,99]", "add bf16[B,3,11,9]", // conv1, its bias cast as conv2d's
				"relu bf16[B,3,11,9]", "maxpool_argmax i32[B,3,5,4]", "maxpool_pick bf16[B,3,5,4]", // pooling keeps its input's type
				"im2col bf16[B,27,20]", "matmul bf16[B,5,20]", "add bf16[B,5,5,4]",
				"relu bf16[B,5,5,4]", "maxpool_argmax i32[B,5,2,2]", "maxpool_pick bf16[B,5,2,2]",
				"matmul bf16[B,7]", "relu bf16[B,7]", "matmul bf16[B,4]", "cross_entropy f32[]",
			}
			if bn {
				// Batch norm reads the conv's bf16 output widened and
				// computes its output in f32 and its statistics in f64
				// (as in an f32 model: ops.BatchNorm2d); the output is
				// stored in bf16 (as PyTorch's batch_norm returns its
				// input's type), so the ReLU and pooling after it run in
				// bf16 again.
				want = []string{
					"im2col bf16[B,9,99]", "matmul bf16[B,3,99]", "add bf16[B,3,11,9]",
					"mean f64[3]", "mean f64[3]", "relu f64[3]", "add f32[B,3,11,9]", "cast bf16[B,3,11,9]", // the variance clamped at 0
					"relu bf16[B,3,11,9]", "maxpool_argmax i32[B,3,5,4]", "maxpool_pick bf16[B,3,5,4]",
					"im2col bf16[B,27,20]", "matmul bf16[B,5,20]", "add bf16[B,5,5,4]",
					"mean f64[5]", "mean f64[5]", "relu f64[5]", "add f32[B,5,5,4]", "cast bf16[B,5,5,4]",
					"relu bf16[B,5,5,4]", "maxpool_argmax i32[B,5,2,2]", "maxpool_pick bf16[B,5,2,2]",
					"matmul bf16[B,7]", "relu bf16[B,7]", "matmul bf16[B,4]", "cross_entropy f32[]",
				}
			}
			for i := range want {
				want[i] = strings.ReplaceAll(want[i], "bf16", h.String())
			}
			if strings.Join(got, "; ") != strings.Join(want, "; ") {
				t.Errorf("%s bn=%v after autocast:\n got %s\nwant %s", h, bn, strings.Join(got, "; "), strings.Join(want, "; "))
			}

			for _, fuse := range []bool{true, false} {
				prog, err := Compile(m, Options{Fuse: fuse})
				if err != nil {
					t.Fatal(err)
				}
				for name, g := range prog.Step.Grads {
					if g.DType != ir.F32 {
						t.Errorf("grad %s is %s, want f32", name, g.Type())
					}
				}
				for _, v := range prog.Step.Values {
					if v.Op == "matmul" && v.DType != h && !wgradF32(v) {
						t.Errorf("%s: want a %s GEMM", v.LongString(), h)
					}
					if v.Op == "maxpool_argmax" && v.Args[0].Op != "relu" {
						t.Errorf("fuse=%v: %s pools before the ReLU", fuse, v.LongString())
					}
				}
				for _, gs := range prog.Groups {
					for _, g := range gs {
						if g.SumBatch != nil && g.SumBatch.DType.IsHalf() {
							t.Errorf("fuse=%v: %s sums a batch of %s products in the GEMM", fuse, g.SumBatch.LongString(), h)
						}
					}
				}
			}
		}
	}
}

// TestAutocastCastsBeforeBroadcast: a grouped convolution's weight is
// broadcast over the batch for its GEMM (irtest.ConvNet's grouped,
// dilated and strided convolutions). Under mixed precision the weight is
// cast first and the broadcast moves half elements: no f32 broadcast is
// left in the step, fused or not, and each half broadcast reads a cast of
// a tensor without the batch dim.
func TestAutocastCastsBeforeBroadcast(t *testing.T) {
	for _, h := range []ir.DType{ir.BF16, ir.F16} {
		for _, fuse := range []bool{true, false} {
			m := irtest.ConvNet(ir.F32, 5, irtest.Adam)
			m.Precision = &ir.Precision{Type: h}
			p, err := Compile(m, Options{Fuse: fuse})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, v := range p.Step.Values {
				if v.Op != "broadcast" || v.Phase == "bwd" {
					continue
				}
				x := v.Args[0]
				if v.DType != h || x.Op != "cast" || x.Shape.Size().Eval(map[string]int{"B": 1}) >= v.Shape.Size().Eval(map[string]int{"B": 2}) {
					t.Errorf("%s fuse=%v: %s of %s", h, fuse, v.LongString(), x.LongString())
				}
				n++
			}
			if n == 0 {
				t.Errorf("%s fuse=%v: no broadcast of a grouped convolution's weight", h, fuse)
			}
		}
	}
}
