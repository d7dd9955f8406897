package main

import (
	"fmt"

	"github.com/ngen-ml/ngen/runtime"
)

// -amp trains a model's mixed-precision build: a package generated with
// ngen build -amp (models/mlp/amp.go), registered beside the f32 one and
// found by its model's name and its 16-bit type. Such packages are not
// -model names of their own.

// ampTypes are -amp's values with the plan dtype of each.
var ampTypes = map[string]runtime.DType{"bf16": runtime.BF16, "fp16": runtime.F16}

// halfType is the 16-bit type a plan stores activations in, or F32 for a
// model without mixed precision.
func halfType(p *runtime.Plan) runtime.DType {
	for _, b := range p.Buffers {
		if b.DType == runtime.BF16 || b.DType == runtime.F16 {
			return b.DType
		}
	}
	return runtime.F32
}

// ampBuilds maps a model's name and an -amp value to the package of its
// mixed-precision build ("mlp", "bf16" → "mlp_bf16"); imageClassifiers
// fills it.
var ampBuilds = map[string]map[string]string{}

// ampFlagOf is -amp's value for a 16-bit plan dtype.
func ampFlagOf(dt runtime.DType) string {
	for k, v := range ampTypes {
		if v == dt {
			return k
		}
	}
	return dt.String()
}

// trainedAs is the models map's key that trains name under amp: the
// mixed-precision package, or name itself without -amp or with -amp off.
func trainedAs(name, amp string) string {
	if amp == "" || amp == "off" {
		return name
	}
	return ampBuilds[name][amp]
}

// ampOf says which model and type a mixed-precision package builds, so
// that -model names the model and -amp the type.
func ampOf(pkg string) (model, amp string, ok bool) {
	for m, byType := range ampBuilds {
		for a, p := range byType {
			if p == pkg {
				return m, a, true
			}
		}
	}
	return "", "", false
}

// checkAMP refuses -amp where no mixed-precision build can train: a value
// other than bf16, fp16 or off; a model with neither a package nor a
// declaration to compile one from (jit.go); and the flags that do not
// combine with it.
func checkAMP(name, amp string, seq bool, device, dist string, torch bool) error {
	if m, a, ok := ampOf(name); ok {
		return fmt.Errorf("-model %s is %s's mixed-precision build: give -model %s -amp %s", name, m, m, a)
	}
	if amp == "" || amp == "off" {
		return nil
	}
	if _, ok := ampTypes[amp]; !ok {
		return fmt.Errorf("-amp %s: want bf16, fp16 or off", amp)
	}
	if pkg := ampSource(name, seq); trainedAs(name, amp) == "" || seq {
		// Built at run time from the model's declaration (jit.go).
		if _, ok := declarations[pkg]; !ok {
			return fmt.Errorf("-amp %s: %s has no mixed-precision build in generated/ and no declaration cmd/train can compile one from", amp, name)
		}
	}
	switch {
	case amp == "fp16" && torch:
		return fmt.Errorf("-amp fp16 -torch: PyTorch 1.13's CPU autocast has no float16 (codegen/jit's TestAMPF16Oracle checks ngen's fp16 against an emulation instead); compare -amp bf16 with -torch")
	}
	return nil
}

// ampSource is the f32 package whose declaration -amp compiles for model
// name: the name itself, or a sequence task's package (lstm trains
// charlm).
func ampSource(name string, seq bool) string {
	if seq {
		return seqTasks[name].pkg
	}
	return name
}

// describeAMP prints what the run's loss scaling did: the scale it ends
// at and the steps it skipped (a model without a scaler prints nothing).
func describeAMP(s *runtime.Session, say func(string, ...any)) {
	if st, ok := s.Scaler(); ok {
		say("loss scaling: scale %g, %d step(s) skipped for an inf/NaN loss or gradients\n", st.Scale, st.Skipped)
	}
}
