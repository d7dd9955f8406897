// Package builds compiles the seed models' builds that generated/ does
// not commit, at run time, from their DSL declarations: the
// mixed-precision builds of cmd/train -amp, on the CPU backend (host code
// at -O3, as cgo builds a generated package) or on a GPU (the .cu alone,
// which the CUDA backend compiles with NVRTC). Only generated/mlp_bf16,
// mlp_fp16 and convnet_bf16 are committed: each package adds to every
// build and to the suites that run every registered package.
package builds

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/codegen/jit"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/convnet"
	"github.com/ngen-ml/ngen/models/lstm"
	mlpmodel "github.com/ngen-ml/ngen/models/mlp"
	"github.com/ngen-ml/ngen/models/rnn"
	tfmodels "github.com/ngen-ml/ngen/models/transformer"
	"github.com/ngen-ml/ngen/runtime"
)

// Declarations are the seed models' DSL declarations by their f32
// package's name (the functions models/*/model.go's go:generate lines
// build); cmd/train's TestDeclarationsMatchPackages checks each against
// its package.
var Declarations = map[string]func() *dsl.Model{
	"mlp":         mlpmodel.MLP,
	"convnet":     convnet.ConvNet,
	"convnet_bn":  convnet.ConvNetBN,
	"charlm":      lstm.CharLM,
	"rnn":         rnn.RNN,
	"gpt":         tfmodels.GPT,
	"transformer": tfmodels.TransformerLM,
}

// Program compiles pkg's declared model as ngen build does (fused,
// reference batch 128) under amp ("off" for the f32 plan, "bf16", "fp16").
func Program(pkg, amp string) (*compiler.Program, error) {
	return programForm(pkg, amp, ops.TensorAuto)
}

// programForm is Program with 16-bit attention in the GPU form tform.
func programForm(pkg, amp string, tform ops.TensorForm) (*compiler.Program, error) {
	decl, ok := Declarations[pkg]
	if !ok {
		return nil, fmt.Errorf("%s has no mixed-precision build in generated/ and no declaration to compile one from", pkg)
	}
	mode, err := compiler.ParseAMP(amp)
	if err != nil {
		return nil, err
	}
	m, err := decl().Build()
	if err != nil {
		return nil, err
	}
	return compiler.Compile(m, compiler.Options{Fuse: true, AMP: mode, TensorForm: tform, RefBatch: 128})
}

// Target is what a build's module is for.
type Target int

const (
	// CPU: the host code at -O3 with the AVX2 copies of the kernels
	// (jit.BuildRelease; g++, cached by content), and the .cu.
	CPU Target = iota
	// GPU: the .cu alone (jit.BuildGPU), for the CUDA backend's NVRTC.
	GPU
)

// Register compiles pkg's model under amp for target and registers it as
// a generated package registers itself, named pkg_amp (pkg_amp_gpu for a
// GPU build, whose module a CPU device cannot run); a second call finds
// the first's registration.
func Register(pkg, amp string, target Target) (*runtime.Generated, error) {
	name := pkg + "_" + amp
	if target == GPU {
		name += "_gpu"
	}
	if g, err := runtime.Registered(compiledPath(name)); err == nil {
		return g, nil
	}
	p, err := Program(pkg, amp)
	if err != nil {
		return nil, fmt.Errorf("-amp %s: %w", amp, err)
	}
	build := jit.BuildRelease
	if target == GPU {
		build = jit.BuildGPU
	}
	g, err := register(name, p, build)
	if err != nil {
		return nil, fmt.Errorf("-amp %s: compiling %s's build: %w", amp, pkg, err)
	}
	return g, nil
}

// compiledPath is the registry path of a build compiled at run time.
func compiledPath(name string) string { return "runtime-compiled/" + name }

// register builds p's module with build and registers it under name, as a
// generated package registers itself.
func register(name string, p *compiler.Program, build func(*compiler.Program) (*runtime.Module, *runtime.Plan, error)) (*runtime.Generated, error) {
	mod, plan, err := build(p)
	if err != nil {
		return nil, err
	}
	g := runtime.Generated{Path: compiledPath(name), Name: name, Model: p.Model.Name, Source: p.Model.Source, Plan: plan,
		Module: func() *runtime.Module { return mod }}
	runtime.Register(g)
	return runtime.Registered(g.Path)
}

// FormDeclarations are the models whose recurrences have two GPU forms
// worth timing side by side (compiler.Options.StepForm): the LSTM LM of
// the GPU benchmark, whose generated package takes the stepped form.
var FormDeclarations = map[string]func() *dsl.Model{
	"lstmbench": lstm.Bench,
	"charlm":    Declarations["charlm"],
}

// RegisterForm compiles pkg's model (fused, f32) with its loops in form
// for a GPU (the .cu alone, jit.BuildGPU) and registers it as
// pkg_<form>_gpu, for the GPU benchmark to time against the generated
// package; a second call finds the first's registration.
func RegisterForm(pkg string, form ops.StepForm) (*runtime.Generated, error) {
	decl, ok := FormDeclarations[pkg]
	if !ok {
		return nil, fmt.Errorf("%s has no declaration to compile another loop form from", pkg)
	}
	name := pkg + "_" + form.String() + "_gpu"
	if g, err := runtime.Registered(compiledPath(name)); err == nil {
		return g, nil
	}
	m, err := decl().Build()
	if err != nil {
		return nil, err
	}
	p, err := compiler.Compile(m, compiler.Options{Fuse: true, StepForm: form, RefBatch: 128})
	if err != nil {
		return nil, err
	}
	g, err := register(name, p, jit.BuildGPU)
	if err != nil {
		return nil, fmt.Errorf("compiling %s's %s build: %w", pkg, form, err)
	}
	return g, nil
}

// RegisterAttentionForm compiles pkg's model under amp for a GPU with its
// 16-bit attention in the form tform (compiler.Options.TensorForm) and
// registers it as pkg_amp_<form>_gpu, for the GPU benchmark to time the
// CUDA-core attention beside the tensor-core one (Register's default); a
// second call finds the first's registration.
func RegisterAttentionForm(pkg, amp string, tform ops.TensorForm) (*runtime.Generated, error) {
	name := pkg + "_" + amp + "_" + strings.ReplaceAll(tform.String(), "-", "") + "_gpu"
	if g, err := runtime.Registered(compiledPath(name)); err == nil {
		return g, nil
	}
	p, err := programForm(pkg, amp, tform)
	if err != nil {
		return nil, fmt.Errorf("-amp %s: %w", amp, err)
	}
	g, err := register(name, p, jit.BuildGPU)
	if err != nil {
		return nil, fmt.Errorf("-amp %s: compiling %s's %s build: %w", amp, pkg, tform, err)
	}
	return g, nil
}
