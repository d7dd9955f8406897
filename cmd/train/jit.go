package main

import (
	"fmt"
	"time"

	"github.com/ngen-ml/ngen/codegen/jit"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/dsl"
	"github.com/ngen-ml/ngen/models/convnet"
	"github.com/ngen-ml/ngen/models/lstm"
	mlpmodel "github.com/ngen-ml/ngen/models/mlp"
	"github.com/ngen-ml/ngen/models/rnn"
	tfmodels "github.com/ngen-ml/ngen/models/transformer"
	"github.com/ngen-ml/ngen/runtime"
)

// -amp for a model whose mixed-precision build generated/ lacks: cmd/train
// compiles that build at run time from the model's DSL declaration, as
// ngen build -amp would (compiler, codegen, then g++ at -O3 with the AVX2
// copies of the kernels: the code and flags cgo builds a generated
// package's host glue with), caches the module by content hash under the
// user's cache directory, and registers it as a generated package
// registers itself. Only generated/mlp_bf16, mlp_fp16 and convnet_bf16
// are committed: each package adds to every build and to the suites that
// run every registered package.

// declarations are the seed models' DSL declarations by their f32
// package's name (the functions models/*/model.go's go:generate lines
// build); TestDeclarationsMatchPackages checks each against its package.
var declarations = map[string]func() *dsl.Model{
	"mlp":         mlpmodel.MLP,
	"convnet":     convnet.ConvNet,
	"convnet_bn":  convnet.ConvNetBN,
	"charlm":      lstm.CharLM,
	"rnn":         rnn.RNN,
	"gpt":         tfmodels.GPT,
	"transformer": tfmodels.TransformerLM,
}

// compileProgram compiles pkg's declared model as ngen build does (fused,
// reference batch 128) under amp ("off" for the f32 plan).
func compileProgram(pkg, amp string) (*compiler.Program, error) {
	decl, ok := declarations[pkg]
	if !ok {
		return nil, fmt.Errorf("%s has no mixed-precision build in generated/ and no declaration cmd/train can compile one from", pkg)
	}
	mode, err := compiler.ParseAMP(amp)
	if err != nil {
		return nil, err
	}
	m, err := decl().Build()
	if err != nil {
		return nil, err
	}
	return compiler.Compile(m, compiler.Options{Fuse: true, AMP: mode, RefBatch: 128})
}

// compileAMP builds package pkg's model under -amp amp at run time and
// registers it as pkg_amp; say reports the compile.
func compileAMP(pkg, amp string, say func(string, ...any)) (*runtime.Generated, error) {
	p, err := compileProgram(pkg, amp)
	if err != nil {
		return nil, fmt.Errorf("-amp %s: %w", amp, err)
	}
	start := time.Now()
	mod, plan, err := jit.BuildRelease(p)
	if err != nil {
		return nil, fmt.Errorf("-amp %s: compiling %s's build: %w", amp, pkg, err)
	}
	name := pkg + "_" + amp
	say("%s: %s build made at run time in %.1f s (generated/ has none; g++ -O3, cached by content under the user's cache directory)\n", pkg, amp, time.Since(start).Seconds())
	g := runtime.Generated{Path: "runtime-compiled/" + name, Name: name, Model: p.Model.Name, Source: p.Model.Source, Plan: plan,
		Module: func() *runtime.Module { return mod }}
	runtime.Register(g)
	return runtime.Registered(g.Path)
}
