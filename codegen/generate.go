// Package codegen renders a compiled program as files: the CUDA C kernels
// (one .cu per model), the host glue that lets the CPU backend run those
// same kernels through cgo, and a typed Go package written with jennifer.
// Generate is a pure function; WriteDir is the only step that touches the
// file system.
//
// Pipeline: DSL → IR → passes → kernels and glue (this package) → runtime.
package codegen

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu/emu"
)

//go:embed preamble.cuh
var preamble string

// NVCCFlags are the fixed flags every .cu is compiled with (by ngen build
// into the committed fatbin and PTX, by the tests with warnings as errors,
// and by NVRTC at run time); the generated header records them. fmad: a*b+c
// may contract to an FMA; ftz: single-precision denormals flush to zero (the
// CPU emulation does the same); -lineinfo: profilers map SASS back to .cu
// lines, at no cost in speed (codegen/nvcc keeps the build directory out of
// the output, so committed binaries stay the same on every machine).
var NVCCFlags = []string{"-O3", "--fmad=true", "--ftz=true", "-lineinfo"}

// NVCCWarnFlags turn every nvcc warning into an error, for the tests.
var NVCCWarnFlags = []string{"-Werror", "all-warnings"}

// Options controls generation.
type Options struct {
	Package string // Go package name (sanitised again here)
	Source  string // the DSL file, for the generated-code header
	// Unique tells this package apart from others of the same name linked
	// into one binary (ngen build passes its import path): the C entry
	// point's name carries its hash. Empty: the hash of the kernels.
	Unique string
	// PTX is nvcc's compute_80 PTX for the .cu and Fatbin its sm_80 and
	// sm_90 images plus that PTX, when nvcc was available (codegen/nvcc).
	PTX, Fatbin []byte
}

// Kernels renders the program's kernels and completes the plan's launch
// steps and GEMM steps. It returns the .cu body (without header) and the
// completed plan (a copy: the program is not changed).
func Kernels(p *compiler.Program) (string, *runtime.Plan, error) {
	plan := clonePlan(p.Plan)
	var src strings.Builder
	bySource := map[string]int{}
	names := map[string]bool{}
	status := statusBuffer(plan)
	add := func(k *kernel, st *runtime.Step) {
		// Functions share identical kernels; a name clash with a
		// different body gets a suffix.
		body := k.render()
		idx, ok := bySource[body]
		if !ok {
			base := k.name
			for n := 2; names[k.name]; n++ {
				k.name = fmt.Sprintf("%s_%d", base, n)
			}
			names[k.name] = true
			body = k.render()
			bySource[body] = len(plan.Kernels)
			idx = len(plan.Kernels)
			plan.Kernels = append(plan.Kernels, k.info())
			src.WriteString(body)
			src.WriteString("\n")
		}
		st.Kernel = idx
		st.Grid = k.grid
		st.Block = k.block
		st.Args = k.args()
	}
	for fi, f := range p.Funcs() {
		for _, g := range p.Groups[f] {
			st := &plan.Funcs[fi].Steps[g.Step]
			if g.Kind == compiler.Gemm {
				if err := gemmStep(p, g, st); err != nil {
					return "", nil, err
				}
				continue
			}
			var k *kernel
			var err error
			switch g.Kind {
			case compiler.EW:
				k = elementwiseKernel(p, g)
			case compiler.Reduce:
				k = reduceKernel(p, g)
			case compiler.CE:
				k, err = ceKernel(p, g)
			case compiler.Loop:
				k = loopKernel(p, g)
			}
			if err != nil {
				return "", nil, err
			}
			if status >= 0 && isOptGroup(g) {
				guardOpt(k, status)
			}
			add(k, st)
		}
	}
	for fi := range plan.Funcs {
		for si := range plan.Funcs[fi].Steps {
			st := &plan.Funcs[fi].Steps[si]
			if st.Kind != runtime.LaunchStep || st.Builtin == "" {
				continue
			}
			k, err := builtinKernel(plan, st)
			if err != nil {
				return "", nil, err
			}
			add(k, st)
		}
	}
	return src.String(), plan, nil
}

// gemmStep fills a GEMM step from its matmul.
func gemmStep(p *compiler.Program, g *compiler.Group, st *runtime.Step) error {
	v := g.Root
	a, b := v.Args[0], v.Args[1]
	m, k := ops.MatDims(a.Shape, v.Attrs.TransA)
	_, n := ops.MatDims(b.Shape, v.Attrs.TransB)
	batch := v.Shape[:len(v.Shape)-2]
	for _, x := range []*ir.Value{a, b} {
		xb := x.Shape[:len(x.Shape)-2]
		if len(xb) > 0 && !xb.Eq(batch) {
			return fmt.Errorf("matmul (%s): batch dims %s of %s must equal the result's %s or be absent", v.Pos, xb, x.Shape, batch)
		}
	}
	size := func(d ...ir.Dim) runtime.Size {
		z := ir.Shape(d).Size()
		return runtime.Size{Mul: z.N, Syms: z.Syms}
	}
	st.Gemm = runtime.Gemm{
		TransA: v.Attrs.TransA, TransB: v.Attrs.TransB,
		M: size(m), N: size(n), K: size(k),
		A: p.BufOf[a], B: p.BufOf[b], C: p.BufOf[v],
		Batch:  size(batch...),
		BatchA: len(a.Shape) > 2, BatchB: len(b.Shape) > 2,
		Alpha: 1,
	}
	if g.SumBatch != nil {
		st.Gemm.C, st.Gemm.SumBatch = p.BufOf[g.SumBatch], true
	}
	return nil
}

func clonePlan(p *runtime.Plan) *runtime.Plan {
	c := *p
	c.Buffers = append([]runtime.Buffer(nil), p.Buffers...)
	c.Checks = append([]runtime.Check(nil), p.Checks...)
	c.Funcs = nil
	for _, f := range p.Funcs {
		f.Steps = append([]runtime.Step(nil), f.Steps...)
		c.Funcs = append(c.Funcs, f)
	}
	c.Kernels = nil
	return &c
}

// Header is line 1 of every generated file.
func Header(source string) string {
	return fmt.Sprintf("// Code generated by ngen from %s. DO NOT EDIT.", sanitizeComment(source))
}

func sanitizeComment(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '*' && false {
			return '_'
		}
		return r
	}, s)
}

// CUDA renders the complete .cu file.
func CUDA(p *compiler.Program, body string) string {
	var b strings.Builder
	b.WriteString(Header(p.Model.Source) + "\n")
	fmt.Fprintf(&b, "// Model %s: fused kernels for the training step and the forward pass.\n", compiler.Sanitize(p.Model.Name))
	fmt.Fprintf(&b, "// nvcc flags: %s (sm_80, sm_90, compute_80 PTX)\n\n", strings.Join(NVCCFlags, " "))
	b.WriteString(preamble)
	b.WriteString("\n")
	b.WriteString(body)
	return b.String()
}

// CPUGlue renders the C++ file that compiles the .cu against the emulation
// header and exposes entry, the function the CPU backend calls.
func CPUGlue(p *compiler.Program, plan *runtime.Plan, cuFile, entry string) string {
	var b strings.Builder
	b.WriteString(Header(p.Model.Source) + "\n")
	b.WriteString("// Runs the kernels of " + cuFile + " on the host (runtime/cpu).\n")
	b.WriteString("#define NGEN_EMU 1\n#include \"ngen_emu.h\"\n")
	// The kernels compile as inline functions and their __shared__ arrays
	// as static thread_locals in them: with external linkage, every
	// module's kernel of one name would share one array (a unique symbol
	// across dlopened modules, one COMDAT in a linked binary), sized by
	// whichever module came first. The unnamed namespace keeps them
	// this module's own.
	fmt.Fprintf(&b, "namespace {\n#include %q\n} // namespace\n\n", cuFile)
	fmt.Fprintf(&b, "extern \"C\" NGEN_EMU_ENTRY int %s(int k, const ngen_launch *l) {\n  switch (k) {\n", entry)
	kinds := map[runtime.ArgKind]string{runtime.ArgI32: "int", runtime.ArgI64: "long long", runtime.ArgU64: "unsigned long long", runtime.ArgF32: "float", runtime.ArgF64: "double"}
	for i, ki := range plan.Kernels {
		// Pointer parameters take their exact C types from the signature.
		types := kernelParamTypes(plan, i)
		var args []string
		for j, kind := range ki.Params {
			t := kinds[kind]
			if kind == runtime.ArgPtr {
				t = types[j]
			}
			args = append(args, fmt.Sprintf("NGEN_ARG(l, %s, %d)", t, j))
		}
		run := "NGEN_RUN_SIMPLE"
		switch {
		case ki.Sync && ki.SoloBlocks && (strings.Contains(ki.Name, "rnn_scan") || strings.Contains(ki.Name, "attention")):
			// The CPU forms of the recurrences and of attention call the
			// GEMM library, which wants the worker's own stack, not a
			// fiber's. Only they: run_solo
			// instantiates a kernel's body twice (with and without fibers),
			// which made the 148 reductions of gpt_unfused's glue take over
			// 20 minutes to compile.
			run = "NGEN_RUN_SOLO"
		case ki.Sync && ki.GridStride:
			// A kernel whose GPU form synchronises but whose CPU
			// form is a grid-stride loop (cross-entropy's warp per
			// row, crossentropy.go).
			run = "NGEN_RUN_SPAN"
		case ki.Sync:
			run = "NGEN_RUN_SYNC"
		case ki.GridStride:
			run = "NGEN_RUN_SPAN"
		}
		fmt.Fprintf(&b, "  case %d: %s(l, %s(%s));\n", i, run, ki.Name, strings.Join(args, ", "))
	}
	b.WriteString("  }\n  return -1;\n}\n")
	return b.String()
}

// kernelParamTypes recovers the C pointer types of kernel i's parameters
// from the buffers its launch steps pass.
func kernelParamTypes(plan *runtime.Plan, i int) []string {
	types := make([]string, len(plan.Kernels[i].Params))
	for _, f := range plan.Funcs {
		for _, st := range f.Steps {
			if st.Kind != runtime.LaunchStep || st.Kernel != i {
				continue
			}
			for j, a := range st.Args {
				if a.Buf >= 0 {
					types[j] = map[runtime.DType]string{runtime.F32: "float", runtime.F64: "double", runtime.I32: "int"}[plan.Buffers[a.Buf].DType] + " *"
				}
			}
		}
	}
	return types
}

// CGo renders the cgo file that builds the CPU glue into the package and
// exports its entry point to the Go glue.
func CGo(p *compiler.Program, pkg, entry string) string {
	var b strings.Builder
	b.WriteString(Header(p.Model.Source) + "\n\n")
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	b.WriteString("// #cgo CXXFLAGS: -std=c++17 -O3\n")
	fmt.Fprintf(&b, "// int %s(int k, const void *l);\n", entry)
	b.WriteString("import \"C\"\n\nimport \"unsafe\"\n\n")
	b.WriteString("// cpuEntry runs this package's kernels on the host; runtime/cpu calls it.\n")
	fmt.Fprintf(&b, "var cpuEntry = unsafe.Pointer(C.%s)\n", entry)
	return b.String()
}

// Generate renders every file of the generated package for the program.
func Generate(p *compiler.Program, opts Options) (map[string][]byte, error) {
	pkg := opts.Package
	if pkg == "" {
		pkg = p.Model.Name
	}
	pkg = compiler.PackageName(pkg)
	body, plan, err := Kernels(p)
	if err != nil {
		return nil, err
	}
	cuFile := pkg + ".cu"
	entry := EntrySymbol(pkg, opts.Unique, body)
	files := map[string][]byte{
		cuFile:           []byte(CUDA(p, body)),
		"cpu_glue.cc":    []byte(CPUGlue(p, plan, cuFile, entry)),
		"kernels_cpu.go": []byte(CGo(p, pkg, entry)),
		"ngen_emu.h":     []byte(Header(p.Model.Source) + "\n" + emu.Header),
	}
	if len(opts.PTX) > 0 {
		files[pkg+".ptx"] = opts.PTX
	}
	if len(opts.Fatbin) > 0 {
		files[pkg+".fatbin"] = opts.Fatbin
	}
	glue, err := GoGlue(plan, GlueOptions{Package: pkg, Source: p.Model.Source, CUFile: cuFile, EntrySymbol: entry,
		HasPTX: len(opts.PTX) > 0, HasFatbin: len(opts.Fatbin) > 0})
	if err != nil {
		return nil, err
	}
	files[pkg+".go"] = glue
	return files, nil
}

// EntrySymbol is the C name of a package's CPU entry point. C symbols share
// one namespace per binary, so two packages named alike (two models called
// mlp in different directories) need different names: the name carries a
// hash of unique, or of the kernels when unique is empty.
func EntrySymbol(pkg, unique, kernels string) string {
	if unique == "" {
		unique = kernels
	}
	sum := sha256.Sum256([]byte(pkg + "\x00" + unique))
	return "ngen_cpu_entry_" + pkg + "_" + hex.EncodeToString(sum[:6])
}

// FileNames lists generated files in a stable order.
func FileNames(files map[string][]byte) []string {
	var out []string
	for n := range files {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
