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
	body, plan, err := codegen.Kernels(p)
	if err != nil {
		return nil, nil, err
	}
	entry := "ngen_cpu_entry_jit"
	files := map[string]string{
		"model.cu":    codegen.CUDA(p, body),
		"cpu_glue.cc": codegen.CPUGlue(p, plan, "model.cu", entry),
		"jit.cc":      "#include \"cpu_glue.cc\"\nextern \"C\" int ngen_cpu_entry(int k, const ngen_launch *l) { return " + entry + "(k, l); }\n",
	}
	m, err := cpu.CompileModule(p.Model.Name, files, "jit.cc", plan.Kernels)
	if err != nil {
		return nil, nil, err
	}
	m.Source = files["model.cu"]
	return m, plan, nil
}

// Session compiles p and opens a session on dev.
func Session(dev runtime.Device, p *compiler.Program, opts runtime.SessionOptions) (*runtime.Session, error) {
	m, plan, err := Build(p)
	if err != nil {
		return nil, err
	}
	return runtime.NewSession(dev, plan, m, opts)
}
