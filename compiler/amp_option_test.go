package compiler

import (
	"reflect"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

// TestParseAMP: the -amp values, and a clear error for any other.
func TestParseAMP(t *testing.T) {
	for s, want := range map[string]AMP{"": AMPModel, "off": AMPOff, "bf16": AMPBF16, "fp16": AMPF16, "f16": AMPF16} {
		if got, err := ParseAMP(s); err != nil || got != want {
			t.Errorf("ParseAMP(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"fp8", "BF16", "on", "fp32"} {
		if _, err := ParseAMP(s); err == nil || !strings.Contains(err.Error(), "want bf16, fp16 or off") {
			t.Errorf("ParseAMP(%q): %v", s, err)
		}
	}
}

// TestCompileAMPOverride: Options.AMP replaces the model's policy with
// dsl.AMP's defaults (f16 scales with GradScaler's, bf16 does not) or
// removes it, leaves the declared model alone, and a policy brings the
// f32 plan to compare with.
func TestCompileAMPOverride(t *testing.T) {
	opt := ir.Optimizer{Kind: "sgd", LR: 0.1}
	for _, c := range []struct {
		amp      AMP
		declared bool // the model declares bf16 itself
		want     *ir.Precision
	}{
		{AMPModel, false, nil},
		{AMPModel, true, &ir.Precision{Type: ir.BF16, Pos: ir.Pos{File: "model.go", Line: 3}}},
		{AMPOff, true, nil},
		{AMPBF16, false, &ir.Precision{Type: ir.BF16, Flag: "-amp bf16"}},
		{AMPF16, true, &ir.Precision{Type: ir.F16, Scaler: ir.GradScaler(), Flag: "-amp fp16"}},
	} {
		m := irtest.MLP(ir.F32, 64, 32, 10, 0, opt)
		if c.declared {
			withPrecision(m, ir.BF16)
		}
		declared := m.Precision
		p, err := Compile(m, Options{Fuse: true, AMP: c.amp})
		if err != nil {
			t.Fatalf("%v: %v", c.amp, err)
		}
		if m.Precision != declared {
			t.Errorf("%v: the declared model's policy changed", c.amp)
		}
		if !reflect.DeepEqual(p.Model.Precision, c.want) {
			t.Errorf("-amp %v (declared %v): policy %+v, want %+v", c.amp, c.declared, p.Model.Precision, c.want)
		}
		if (p.F32 != nil) != (c.want != nil) {
			t.Errorf("-amp %v: f32 plan %v, want one only under a policy", c.amp, p.F32 != nil)
		}
		if p.F32 != nil && (p.F32.Model.Precision != nil || p.F32.PeakBytes <= 0) {
			t.Errorf("-amp %v: the f32 plan has policy %+v, peak %d", c.amp, p.F32.Model.Precision, p.F32.PeakBytes)
		}
	}
}

// TestCompileAMPOverrideRefused: an f64 model under -amp is autocast's
// error naming the flag as the policy's origin; a model with a recurrence
// compiles under it (the recurrence in f32, as autocast runs it on the
// CPU), and so does a model with convolutions (grouped, dilated,
// strided, and average pooling: irtest.ConvNet).
func TestCompileAMPOverrideRefused(t *testing.T) {
	f64 := irtest.MLP(ir.F64, 8, 6, 3, 0, irtest.Adam)
	_, err := Compile(f64, Options{Fuse: true, AMP: AMPBF16})
	if err == nil || !strings.Contains(err.Error(), "-amp bf16") || !strings.Contains(err.Error(), "needs an f32 model") {
		t.Fatalf("an f64 MLP under -amp bf16: %v", err)
	}
	m := irtest.DeepLSTM(ir.F32, 3, 4, 5, 1, 3, 0)
	for _, a := range []AMP{AMPBF16, AMPF16, AMPOff} {
		if _, err := Compile(m, Options{Fuse: true, AMP: a}); err != nil {
			t.Errorf("LSTM under -amp %v: %v", a, err)
		}
	}
	conv := irtest.ConvNet(ir.F32, 10, ir.Optimizer{Kind: "sgd", LR: 0.1})
	for _, fuse := range []bool{true, false} {
		if _, err := Compile(conv, Options{Fuse: fuse, AMP: AMPBF16}); err != nil {
			t.Errorf("convolutions under -amp bf16 (fuse=%v): %v", fuse, err)
		}
	}
}
