// Package jit compiles a program's generated kernels for the CPU backend at
// run time (g++ and dlopen, cached by content hash), so tests and tools can
// run any model without generating and building a Go package. It runs the
// same .cu, emulation header and host glue that generated packages build
// with cgo.
package jit

import (
	"github.com/ngen-ml/ngen/codegen"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// Build renders p's kernels and compiles them into a loadable module.
func Build(p *compiler.Program) (*runtime.Module, *runtime.Plan, error) {
	return build(p, false)
}

// BuildRelease is Build for a module that trains at length (cmd/train's
// run-time mixed-precision builds): the kernels with their AVX2 copies and
// -O3, the code and flags cgo compiles a generated package's host glue
// with, so the module computes what the package would. It compiles about
// twice as long as Build's baseline-only -O0 module; both are cached.
func BuildRelease(p *compiler.Program) (*runtime.Module, *runtime.Plan, error) {
	return build(p, true)
}

// BuildGPU is the module a GPU device loads for p: the generated .cu,
// which the CUDA backend compiles with NVRTC for the device it runs on,
// and no host code (so no g++ and no CPU entry: a CPU device refuses it).
// It is what a package generated without nvcc hands the backend, for a
// build that has no package (cmd/train -amp -device cuda, the GPU
// benchmark's mixed-precision builds).
func BuildGPU(p *compiler.Program) (*runtime.Module, *runtime.Plan, error) {
	body, plan, err := codegen.Kernels(p)
	if err != nil {
		return nil, nil, err
	}
	return &runtime.Module{Name: p.Model.Name, Source: codegen.CUDA(p, body), Kernels: plan.Kernels}, plan, nil
}

func build(p *compiler.Program, release bool) (*runtime.Module, *runtime.Plan, error) {
	r, err := codegen.Render(p)
	if err != nil {
		return nil, nil, err
	}
	cu := codegen.CUDA(p, r.CUDA)
	glue := codegen.HostGlue(p, r, "model.cu", cu, "ngen_cpu_entry")
	var m *runtime.Module
	if release {
		m, err = cpu.CompileModuleAt("-O3", p.Model.Name, map[string]string{"host.cc": glue}, "host.cc", r.Plan.Kernels)
	} else {
		// One copy of each launcher, for baseline x86-64: these modules
		// serve tests and tools, and the AVX2 copy that generated packages
		// add is bit-identical to it (runtime/cpu's
		// TestEntryCloneBitIdentical) and doubled their compile time.
		files := map[string]string{"host.cc": "#define NGEN_EMU_NO_CLONES 1\n" + glue}
		m, err = cpu.CompileModule(p.Model.Name, files, "host.cc", r.Plan.Kernels)
	}
	if err != nil {
		return nil, nil, err
	}
	m.Source = cu
	return m, r.Plan, nil
}

// Session compiles p and opens a session on dev.
func Session(dev runtime.Device, p *compiler.Program, opts runtime.SessionOptions) (*runtime.Session, error) {
	m, plan, err := Build(p)
	if err != nil {
		return nil, err
	}
	return runtime.NewSession(dev, plan, m, opts)
}
