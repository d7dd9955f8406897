package compiler

import (
	"slices"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
)

// TestPoolFirst: maxpool(relu(conv + bias)) becomes relu(maxpool(conv) +
// bias); a ReLU that something else also reads, one after an elementwise
// op (not a GEMM), and average pooling are left alone; the model passed
// in is not changed.
func TestPoolFirst(t *testing.T) {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(2), ir.D(6), ir.D(6))
	y := b.Input("y", ir.I32, ir.S("B"))
	win := irtest.Window(2, 2, 2, 0, 1, 1)
	h := ops.MaxPool2d(b.Builder, b.Unary("relu", b.Conv2d("conv1", x, 3, irtest.Window(3, 3, 1, 1, 1, 1), true)), win) // [B,3,3,3]
	// Read twice: pooled and summed, so it must stay.
	r2 := b.Unary("relu", b.Conv2d("conv2", h, 3, irtest.Window(1, 1, 1, 0, 1, 1), true))
	h2 := b.Binary("add", ops.MaxPool2d(b.Builder, r2, irtest.Window(3, 3, 1, 1, 1, 1)), r2)
	// After an elementwise op, as batch norm's affine: stays.
	r3 := b.Unary("relu", b.Scale(b.Conv2d("conv3", h2, 3, irtest.Window(1, 1, 1, 0, 1, 1), true), 2))
	h2 = ops.MaxPool2d(b.Builder, r3, irtest.Window(3, 3, 1, 1, 1, 1))
	h2 = b.Op("avgpool", ir.Attrs{Ints: win.Ints()}, b.Unary("relu", h2)) // [B,3,1,1]
	logits := b.Linear("fc", b.Op("reshape", ir.Attrs{Shape: ir.Shape{ir.S("B"), ir.D(3)}}, h2), 4)
	m := b.Model("m", b.Binary("cross_entropy", logits, y), logits, ir.Optimizer{Kind: "sgd", LR: 0.1})
	before := m.Forward.Print()

	p := through(t, m, "infer shapes", true)
	if err := poolFirst(p); err != nil {
		t.Fatal(err)
	}
	if err := verify(p); err != nil {
		t.Fatal(err)
	}
	if m.Forward.Print() != before {
		t.Fatal("poolFirst changed the model it was given")
	}
	f := p.Model.Forward
	if p.Model.Loss == nil || p.Model.Output == nil || !slices.Contains(f.Values, p.Model.Loss) || !slices.Contains(f.Values, p.Model.Output) {
		t.Fatal("the copy's loss and output are not its own values")
	}
	var pooledFirst, reluFirst int
	for _, v := range f.Values {
		if v.Op != "maxpool_pick" {
			continue
		}
		switch v.Args[0].Op {
		case "relu":
			reluFirst++
		case "reshape": // the first convolution's GEMM output, [B,3,6,6]
			pooledFirst++
			if v.Args[1].Args[0] != v.Args[0] {
				t.Errorf("argmax reads %s, pick reads %s", v.Args[1].Args[0], v.Args[0])
			}
		default:
			t.Errorf("maxpool_pick of %s", v.Args[0].LongString())
		}
	}
	if pooledFirst != 1 || reluFirst != 2 {
		t.Fatalf("pooled before the ReLU: %d, after: %d; want 1 and 2 (the twice-read ReLU and the scaled one stay)\n%s", pooledFirst, reluFirst, f.Print())
	}
	// The ReLU now reads bias + pooled values, at the pooled shape.
	for _, v := range f.Values {
		if v.Op == "relu" && v.Args[0].Op == "add" && v.Args[0].Args[0].Op == "maxpool_pick" {
			if !v.Shape.Eq(ir.Shape{ir.S("B"), ir.D(3), ir.D(3), ir.D(3)}) {
				t.Errorf("rewritten ReLU has shape %s", v.Shape)
			}
			return
		}
	}
	t.Fatalf("no relu(maxpool + bias) in\n%s", f.Print())
}

// TestPoolFirstKeepsOutput: a ReLU the caller reads back (the model's
// output) is not moved after the pooling that also reads it.
func TestPoolFirstKeepsOutput(t *testing.T) {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(2), ir.D(4), ir.D(4))
	y := b.Input("y", ir.I32, ir.S("B"))
	r := b.Unary("relu", b.Conv2d("conv", x, 3, irtest.Window(3, 3, 1, 1, 1, 1), true)) // [B,3,4,4]
	h := ops.MaxPool2d(b.Builder, r, irtest.Window(4, 4, 4, 0, 1, 1))                   // [B,3,1,1]
	logits := b.Linear("fc", b.Op("reshape", ir.Attrs{Shape: ir.Shape{ir.S("B"), ir.D(3)}}, h), 4)
	m := b.Model("m", b.Binary("cross_entropy", logits, y), r, ir.Optimizer{Kind: "sgd", LR: 0.1})
	p := through(t, m, "infer shapes", true)
	if err := poolFirst(p); err != nil {
		t.Fatal(err)
	}
	if p.Model.Output.Op != "relu" || !slices.Contains(p.Model.Forward.Values, p.Model.Output) {
		t.Fatalf("the output ReLU was rewritten away:\n%s", p.Model.Forward.Print())
	}
	for _, v := range p.Model.Forward.Values {
		if v.Op == "maxpool_pick" && v.Args[0] != p.Model.Output {
			t.Fatalf("the pooling no longer reads the output ReLU:\n%s", p.Model.Forward.Print())
		}
	}
}
