package ops

import (
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// TestStepForm: the flag's spellings, and which values each form steps: a
// recurrence's stepped form is the default from SteppedMinBytes of W_hh
// up, "loop" never steps and "stepped" always does.
func TestStepForm(t *testing.T) {
	for s, want := range map[string]StepForm{"": StepAuto, "auto": StepAuto, "loop": StepNever, "stepped": StepAlways} {
		if got, err := ParseStepForm(s); err != nil || got != want {
			t.Errorf("ParseStepForm(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseStepForm("persistent"); err == nil {
		t.Error("ParseStepForm accepted persistent")
	}
	scan := func(h int) *ir.Value {
		f := func(s ...ir.Dim) *ir.Value { return &ir.Value{Shape: s, DType: ir.F32} }
		B := ir.Dim{Sym: "B"}
		return &ir.Value{Op: "rnn_scan", Attrs: ir.Attrs{Str: "lstm"}, DType: ir.F32, Shape: ir.Shape{B, ir.D(5), ir.D(6 * h)},
			Args: []*ir.Value{f(B, ir.D(5), ir.D(4*h)), f(ir.D(4*h), ir.D(h)), f(B, ir.D(h)), f(B, ir.D(h))}}
	}
	small, large := scan(45), scan(46) // 4·45²·4 = 32400 bytes, 4·46²·4 = 33856
	def := Lookup("rnn_scan")
	for _, tc := range []struct {
		form         StepForm
		small, large bool
	}{{StepAuto, false, true}, {StepNever, false, false}, {StepAlways, true, true}} {
		if got := tc.form.Use(def.Stepped(small)); got != tc.small {
			t.Errorf("form %v, H 45: stepped %v", tc.form, got)
		}
		if got := tc.form.Use(def.Stepped(large)); got != tc.large {
			t.Errorf("form %v, H 46: stepped %v", tc.form, got)
		}
	}
	if st := def.Stepped(large); st.Launches != 5 || st.Per != StepTile || st.Threads != 128 || !st.Work.Eq(ir.Shape{{Sym: "B"}, ir.D(6)}) {
		t.Errorf("H 46, T 5: %+v", st)
	}
	if st := Lookup("rnn_scan_bwd").Stepped; st == nil {
		t.Error("rnn_scan_bwd has no stepped form")
	}
}

// TestTensorForm: the flag's spellings, and that cuda-cores keeps a
// 16-bit attention with heads of 16 off its tensor-core form, which auto
// takes; an f32 attention has none.
func TestTensorForm(t *testing.T) {
	for s, want := range map[string]TensorForm{"": TensorAuto, "auto": TensorAuto, "cuda-cores": TensorNever} {
		if got, err := ParseTensorForm(s); err != nil || got != want || (s != "" && got.String() != s) {
			t.Errorf("ParseTensorForm(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	if _, err := ParseTensorForm("tensor"); err == nil {
		t.Error("ParseTensorForm accepted tensor")
	}
	att := func(dt ir.DType, dh int) *ir.Value {
		B := ir.Dim{Sym: "B"}
		x := &ir.Value{Op: "input", Shape: ir.Shape{B, ir.D(70), ir.D(6 * dh)}, DType: dt}
		v := &ir.Value{Op: "attention", Args: []*ir.Value{x, x, x}, Attrs: ir.Attrs{Ints: []int{2, dh, 0, 2 * dh, 4 * dh}, F: 0.25}, DType: dt}
		s, _, err := attentionInfer(v)
		if err != nil {
			t.Fatal(err)
		}
		v.Shape = s
		return v
	}
	def := Lookup("attention")
	for _, tc := range []struct {
		v    *ir.Value
		form TensorForm
		want bool
	}{
		{att(ir.BF16, 16), TensorAuto, true},
		{att(ir.F16, 32), TensorAuto, true},
		{att(ir.BF16, 16), TensorNever, false},
		{att(ir.BF16, 8), TensorAuto, false},
		{att(ir.F32, 16), TensorAuto, false},
	} {
		blocks, got := tc.form.Use(def, tc.v)
		if got != tc.want {
			t.Errorf("%s attention, head %d, %v: tensor-core form %v, want %v", tc.v.DType, tc.v.Attrs.Ints[1], tc.form, got, tc.want)
		}
		if got {
			// Items of 64 queries: two per head for 70.
			if n := blocks.Size(); n.N != 2*2 || len(n.Syms) != 1 {
				t.Errorf("grid %s, want B·2 heads·2 items", blocks)
			}
		}
	}
}
