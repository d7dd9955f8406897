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
