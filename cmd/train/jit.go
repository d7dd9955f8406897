package main

import (
	"strings"
	"time"

	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/models/builds"
	"github.com/ngen-ml/ngen/runtime"
)

// -amp for a model whose mixed-precision build generated/ lacks: cmd/train
// compiles that build at run time from the model's DSL declaration
// (models/builds), as ngen build -amp would. For the CPU backend that is
// the host code at -O3 with the AVX2 copies of the kernels (the code and
// flags cgo builds a generated package's host glue with), cached by
// content under the user's cache directory; for -device cuda the .cu
// alone, which the CUDA backend compiles with NVRTC for its GPU. The build
// is registered as a generated package registers itself.

// attentionForm is -attention-form: 16-bit attention's GPU form in the
// builds compileAMP makes for -device cuda (ngen build -attention-form).
var attentionForm ops.TensorForm

// declarations are the seed models' declarations by their f32 package's
// name; TestDeclarationsMatchPackages checks each against its package.
var declarations = builds.Declarations

// compileAMP builds package pkg's model under -amp amp at run time for
// device and registers it; say reports the compile.
func compileAMP(pkg, amp, device string, say func(string, ...any)) (*runtime.Generated, error) {
	target, how := builds.CPU, "g++ -O3, cached by content under the user's cache directory"
	if strings.HasPrefix(device, "cuda") {
		target, how = builds.GPU, "CUDA C for the GPU's NVRTC"
	}
	start := time.Now()
	register := builds.Register
	if target == builds.GPU && attentionForm != ops.TensorAuto {
		register = func(pkg, amp string, _ builds.Target) (*runtime.Generated, error) {
			return builds.RegisterAttentionForm(pkg, amp, attentionForm)
		}
		how += ", attention on CUDA cores"
	}
	g, err := register(pkg, amp, target)
	if err != nil {
		return nil, err
	}
	say("%s: %s build made at run time in %.1f s (generated/ has none; %s)\n", pkg, amp, time.Since(start).Seconds(), how)
	return g, nil
}
