// Package codegen renders a compiled program as files: the CUDA C kernels
// (one .cu per model), the host glue that lets the CPU backend run those
// same kernels through cgo, and a typed Go package written with jennifer.
// Generate is a pure function; WriteDir is the only step that touches the
// file system.
//
// Pipeline: DSL → IR → passes → kernels and glue (this package) → runtime.
package codegen

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"slices"
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

// halfPreamble is the 16-bit float types' part of the preamble, which
// only a program with such values (mixed precision) includes: under nvcc
// CUDA's headers, on the host the emulation header's own types
// (runtime/cpu/emu/ngen_half.h, included by ngen_emu.h).
//
//go:embed preamble_half.cuh
var halfPreamble string

// f32BitsPreamble stores and loads an f32 as two 16-bit elements and
// brings in nvcuda::wmma (attention's tensor-core form), for the
// programs whose attention runs in a 16-bit type (ops/attention.go's
// log-sum-exp); other mixed-precision programs' .cu files do without it.
//
//go:embed preamble_f32bits.cuh
var f32BitsPreamble string

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
	// ImportPath is the package's import path; the Go glue imports its
	// host subpackage below it. Empty: the package name.
	ImportPath string
	// Unique tells this package apart from others of the same name linked
	// into one binary: the C entry point's name carries its hash. Empty:
	// ImportPath, or when that is empty too the hash of the kernels.
	Unique string
	// Fatbin is nvcc's sm_80 and sm_90 images plus compute_80 PTX for the
	// .cu, when nvcc was available, and FatbinStamp the stamp that records
	// what it was built from (codegen/nvcc).
	Fatbin, FatbinStamp []byte
}

// Rendered is a program's kernels, rendered for every target.
type Rendered struct {
	// CUDA is the body of the .cu: every kernel's CUDA form, which nvcc
	// and NVRTC compile and the CPU backend runs as written in its GPU
	// test modes. It holds GPU code only.
	CUDA string
	// Host is the host target's forms of the kernels that have their own
	// (runtime.KernelInfo.Host and Baseline): functions for the host glue.
	Host string
	// Plan is the program's plan with its kernels and steps completed.
	Plan *runtime.Plan
}

// Kernels renders the program's kernels and completes the plan's launch
// steps and GEMM steps. It returns the .cu body (without header) and the
// completed plan (a copy: the program is not changed).
func Kernels(p *compiler.Program) (string, *runtime.Plan, error) {
	r, err := Render(p)
	if err != nil {
		return "", nil, err
	}
	return r.CUDA, r.Plan, nil
}

// forms is one kernel rendered for each target (ops.Target).
type forms [3]*kernel

// Render renders the program's kernels for every target and completes the
// plan's launch and GEMM steps (in a copy: the program is not changed).
//
// A kernel is its canonical text (kernel.canonical) in every target:
// launches whose kernels print alike, across layers or between passes,
// share one kernel, emitted, compiled and loaded once; each step keeps its
// own arguments and its own label.
func Render(p *compiler.Program) (*Rendered, error) {
	plan := clonePlan(p.Plan)
	type emitted struct {
		f      forms
		name   string
		labels []string
	}
	var out []*emitted
	byKey := map[string]int{}
	names := map[string]bool{}
	status := statusBuffer(plan)
	add := func(f forms, st *runtime.Step) error {
		k := f[ops.CUDA]
		if k.label == "" {
			k.label = k.name
		}
		key := f[0].canonical() + "\x00" + f[1].canonical() + "\x00" + f[2].canonical()
		idx, ok := byKey[key]
		if !ok {
			// A name taken by a different kernel gets a suffix.
			name := k.name
			for n := 2; names[name]; n++ {
				name = fmt.Sprintf("%s_%d", k.name, n)
			}
			names[name] = true
			ki, err := f.info(name)
			if err != nil {
				return err
			}
			idx = len(out)
			byKey[key] = idx
			out = append(out, &emitted{f: f, name: name})
			plan.Kernels = append(plan.Kernels, ki)
		}
		out[idx].labels = append(out[idx].labels, k.label)
		st.Kernel = idx
		st.Label = k.label
		st.Grid = k.grid
		st.Block = k.block
		st.Args = k.args()
		return nil
	}
	for fi, fn := range p.Funcs() {
		for _, g := range p.Groups[fn] {
			st := &plan.Funcs[fi].Steps[g.Step]
			if g.Kind == compiler.Gemm {
				if err := gemmStep(p, g, st); err != nil {
					return nil, err
				}
				st.Label = g.Name
				continue
			}
			var f forms
			for t := range f {
				var k *kernel
				var err error
				switch target := ops.Target(t); g.Kind {
				case compiler.EW:
					k = elementwiseKernel(p, g, target)
				case compiler.Reduce:
					k = reduceKernel(p, g, target)
				case compiler.CE:
					k, err = ceKernel(p, g, target)
				case compiler.Loop:
					k = loopKernel(p, g, target)
				}
				if err != nil {
					return nil, err
				}
				if status >= 0 && isOptGroup(g) {
					guardOpt(k, status)
				}
				f[t] = k
			}
			if err := add(f, st); err != nil {
				return nil, err
			}
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
				return nil, err
			}
			if err := add(forms{k, k, k}, st); err != nil {
				return nil, err
			}
		}
	}
	var cu, host strings.Builder
	for i, e := range out {
		cu.WriteString(e.f[ops.CUDA].render(e.name, e.labels))
		cu.WriteString("\n")
		ki := plan.Kernels[i]
		if ki.Host != nil {
			host.WriteString(e.f[ops.Host].render(e.name+ki.Host.Suffix, e.labels))
			host.WriteString("\n")
		}
		if ki.Baseline != nil && (ki.Host == nil || *ki.Baseline != *ki.Host) {
			host.WriteString(e.f[ops.HostBaseline].render(e.name+ki.Baseline.Suffix, e.labels))
			host.WriteString("\n")
		}
	}
	return &Rendered{CUDA: cu.String(), Host: host.String(), Plan: plan}, nil
}

// info is the launch description of a kernel rendered for every target:
// the CUDA form's, and the host forms that differ from it.
func (f forms) info(name string) (runtime.KernelInfo, error) {
	cu, host, base := f[ops.CUDA], f[ops.Host], f[ops.HostBaseline]
	ki := cu.info(name)
	// The plan passes the CUDA form's arguments to whichever form the
	// device runs, so every form must take the same parameters.
	for _, k := range []*kernel{host, base} {
		if got := k.info(name).Params; !slices.Equal(got, ki.Params) {
			return ki, fmt.Errorf("internal error: kernel %s: a host form's parameters %v differ from the CUDA form's %v", name, got, ki.Params)
		}
	}
	ki.Run = runtime.RunThreads
	switch {
	case cu.sync:
		ki.Run = runtime.RunFibers
	case cu.gridStride:
		ki.Run = runtime.RunSpan
	}
	hostForm := func(k *kernel, suffix string) (*runtime.HostForm, error) {
		switch {
		case k.gridStride && !k.sync:
			return &runtime.HostForm{Suffix: suffix, Run: runtime.RunSpan}, nil
		case cu.soloBlocks:
			// The CPU backend launches the kernel with one-thread
			// blocks, where no form needs fibers.
			return &runtime.HostForm{Suffix: suffix, Run: runtime.RunOwnStack}, nil
		}
		return nil, fmt.Errorf("internal error: kernel %s: its host form is neither a grid-stride loop nor run with one-thread blocks", name)
	}
	c := cu.canonical()
	var err error
	if host.canonical() != c {
		if ki.Host, err = hostForm(host, "__host"); err != nil {
			return ki, err
		}
	}
	switch b := base.canonical(); {
	case b == c:
	case b == host.canonical():
		ki.Baseline = ki.Host
	default:
		ki.Baseline, err = hostForm(base, "__baseline")
	}
	return ki, err
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
	if usesHalf(p) {
		b.WriteString(halfPreamble)
		if usesHalfOp(p, "attention") {
			b.WriteString(f32BitsPreamble)
		}
	}
	b.WriteString("\n")
	b.WriteString(body)
	return b.String()
}

// HostGlue renders the C++ file the CPU backend runs a program's kernels
// from, self-contained but for the emulation header: the .cu (its text,
// cuda, as cuName holds it) compiled against the emulation header, the
// host forms, one launcher per kernel that picks the form
// (ngen_launch.forms) and its run mode from the kernel's KernelInfo, and
// entry, the function the CPU backend calls.
func HostGlue(p *compiler.Program, r *Rendered, cuName, cuda, entry string) string {
	plan := r.Plan
	var b strings.Builder
	b.WriteString(Header(p.Model.Source) + "\n")
	b.WriteString("// Runs the kernels of " + cuName + " on the host (runtime/cpu).\n")
	b.WriteString("#define NGEN_EMU 1\n#include \"ngen_emu.h\"\n")
	// The kernels compile as inline functions and their __shared__ arrays
	// as static thread_locals in them: with external linkage, every
	// module's kernel of one name would share one array (a unique symbol
	// across dlopened modules, one COMDAT in a linked binary), sized by
	// whichever module came first. The unnamed namespace keeps them
	// this module's own.
	fmt.Fprintf(&b, "namespace {\n\n// The CUDA forms: %s as written.\n\n", cuName)
	b.WriteString(cuda)
	if r.Host != "" {
		b.WriteString("\n// The host forms: kernels the host target renders in a form of its own.\n\n")
		b.WriteString(r.Host)
	}
	b.WriteString("\n// One launcher per kernel, each compiled for baseline x86-64 and AVX2\n// (NGEN_EMU_LAUNCHER).\n")
	kinds := map[runtime.ArgKind]string{runtime.ArgI32: "int", runtime.ArgI64: "long long", runtime.ArgU64: "unsigned long long", runtime.ArgF32: "float", runtime.ArgF64: "double"}
	runs := map[runtime.RunMode]string{runtime.RunThreads: "NGEN_RUN_SIMPLE", runtime.RunSpan: "NGEN_RUN_SPAN",
		runtime.RunFibers: "NGEN_RUN_SYNC", runtime.RunOwnStack: "NGEN_RUN_OWN_STACK"}
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
		call := func(suffix string) string { return ki.Name + suffix + "(" + strings.Join(args, ", ") + ")" }
		if ki.Host == nil {
			// The CUDA form is the CPU backend's form too.
			fmt.Fprintf(&b, "NGEN_EMU_LAUNCHER int ngen_launch_%d(const ngen_launch *l) {\n", i)
			if ki.Baseline != nil {
				fmt.Fprintf(&b, "  if (l->forms == NGEN_FORMS_BASELINE) %s(l, %s);\n", runs[ki.Baseline.Run], call(ki.Baseline.Suffix))
			}
			fmt.Fprintf(&b, "  %s(l, %s);\n}\n", runs[ki.Run], call(""))
			continue
		}
		// The host form is what runs by default, so only it is compiled
		// twice (NGEN_EMU_LAUNCHER); the forms the test modes run (the
		// CUDA form with GPU blocks, the baseline form) are compiled once,
		// which halves the largest packages' host compile.
		fmt.Fprintf(&b, "NGEN_EMU_TEST_FORMS int ngen_launch_%d_test(const ngen_launch *l) {\n", i)
		if ki.Baseline != nil {
			fmt.Fprintf(&b, "  if (l->forms == NGEN_FORMS_BASELINE) %s(l, %s);\n", runs[ki.Baseline.Run], call(ki.Baseline.Suffix))
		}
		fmt.Fprintf(&b, "  %s(l, %s);\n}\n", runs[ki.Run], call(""))
		fmt.Fprintf(&b, "NGEN_EMU_LAUNCHER int ngen_launch_%d(const ngen_launch *l) {\n", i)
		fmt.Fprintf(&b, "  if (l->forms == NGEN_FORMS_HOST) %s(l, %s);\n", runs[ki.Host.Run], call(ki.Host.Suffix))
		fmt.Fprintf(&b, "  return ngen_launch_%d_test(l);\n}\n", i)
	}
	b.WriteString("} // namespace\n\n")
	fmt.Fprintf(&b, "extern \"C\" int %s(int k, const ngen_launch *l) {\n  switch (k) {\n", entry)
	for i := range plan.Kernels {
		fmt.Fprintf(&b, "  case %d: return ngen_launch_%d(l);\n", i, i)
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
					types[j] = map[runtime.DType]string{runtime.F32: "float", runtime.F64: "double", runtime.I32: "int", runtime.BF16: "__nv_bfloat16", runtime.F16: "__half"}[plan.Buffers[a.Buf].DType] + " *"
				}
			}
		}
	}
	return types
}

// HostGo renders the cgo file of the host subpackage, which builds the host
// glue and exports its entry point as Entry. The subpackage imports nothing
// of ngen, so that a change to ngen's Go packages does not recompile its
// C++; and since the go command does not hash the shared header (outside
// the package directory) for its build cache, the file records the
// header's hash, which changes it whenever the header does.
func HostGo(p *compiler.Program, model, entry string) string {
	var b strings.Builder
	b.WriteString(Header(p.Model.Source) + "\n\n")
	fmt.Fprintf(&b, "// Package host is the CPU backend's build of model %s's kernels (host.cc,\n", model)
	b.WriteString("// compiled by cgo): the model package hands Entry to runtime/cpu.\n")
	b.WriteString("package host\n\n")
	sum := sha256.Sum256([]byte(emu.Header))
	fmt.Fprintf(&b, "// #cgo CXXFLAGS: -std=c++17 -O3 -I${SRCDIR}/../..\n")
	fmt.Fprintf(&b, "// int %s(int k, const void *l);\n", entry)
	b.WriteString("import \"C\"\n\nimport \"unsafe\"\n\n")
	fmt.Fprintf(&b, "// headerSHA256 is the hash of ../../%s, which host.cc includes.\n", EmuHeaderFile)
	fmt.Fprintf(&b, "const headerSHA256 = %q\n\n", hex.EncodeToString(sum[:]))
	b.WriteString("// Entry runs the model's kernels on the host; runtime/cpu calls it.\n")
	fmt.Fprintf(&b, "var Entry = unsafe.Pointer(C.%s)\n", entry)
	return b.String()
}

// EmuHeaderFile is the emulation header every host glue includes. ngen
// build writes one copy at the root of its output directory (SharedFiles),
// which each package's host subpackage finds two levels up.
const EmuHeaderFile = "ngen_emu.h"

// SharedFiles are the files ngen build writes once at the root of its
// output directory, beside the packages.
func SharedFiles() map[string][]byte {
	return map[string][]byte{EmuHeaderFile: []byte("// Code generated by ngen from runtime/cpu/emu/ngen_emu.h. DO NOT EDIT.\n" + emu.Header)}
}

// Generate renders every file of the generated package for the program,
// by name relative to the package's directory (host/ is its host
// subpackage). The package also needs SharedFiles one level up.
func Generate(p *compiler.Program, opts Options) (map[string][]byte, error) {
	pkg := opts.Package
	if pkg == "" {
		pkg = p.Model.Name
	}
	pkg = compiler.PackageName(pkg)
	r, err := Render(p)
	if err != nil {
		return nil, err
	}
	cuFile := pkg + ".cu"
	unique := opts.Unique
	if unique == "" {
		unique = opts.ImportPath
	}
	entry := EntrySymbol(pkg, unique, r.CUDA+r.Host)
	plan, err := runtime.EncodePlan(r.Plan)
	if err != nil {
		return nil, err
	}
	cu := CUDA(p, r.CUDA)
	files := map[string][]byte{
		cuFile:         []byte(cu),
		PlanFile:       plan,
		"host/host.cc": []byte(HostGlue(p, r, cuFile, cu, entry)),
		"host/host.go": []byte(HostGo(p, pkg, entry)),
	}
	if len(opts.Fatbin) > 0 {
		gz, err := GzipFatbin(opts.Fatbin)
		if err != nil {
			return nil, err
		}
		files[FatbinFile(pkg)] = gz
		files[pkg+".nvcc"] = opts.FatbinStamp
	}
	importPath := opts.ImportPath
	if importPath == "" {
		importPath = pkg
	}
	glue, err := GoGlue(r.Plan, GlueOptions{Package: pkg, Source: p.Model.Source, CUFile: cuFile,
		HostImport: importPath + "/host", HasFatbin: len(opts.Fatbin) > 0})
	if err != nil {
		return nil, err
	}
	files[pkg+".go"] = glue
	return files, nil
}

// PlanFile is the plan's file in a generated package (runtime.EncodePlan).
const PlanFile = "plan.json"

// IndexPackages are the packages ngen build keeps beside the packages of
// an output directory. Each imports a set of them, so that a program that
// imports it links those models, each registered with runtime.Register:
// "all" every package, "fused" those generated with fusion (what a
// trainer links: not the -fuse=none references, whose C++ would double
// its build). No model package may take their names.
var IndexPackages = map[string]string{
	"all":   "every model package",
	"fused": "every model package generated with fusion (not -fuse=none)",
}

// Index renders index package name's Go file for the packages at the
// given import paths.
func Index(name string, paths []string) []byte {
	var b strings.Builder
	b.WriteString("// Code generated by ngen build. DO NOT EDIT.\n\n")
	fmt.Fprintf(&b, "// Package %s links %s that ngen build generated\n", name, IndexPackages[name])
	b.WriteString("// into this directory: each registers itself with runtime.Register, so a\n")
	b.WriteString("// program that imports this package finds them through\n")
	b.WriteString("// runtime.Registered and runtime.RegisteredAll.\n")
	fmt.Fprintf(&b, "package %s\n", name)
	if len(paths) > 0 {
		b.WriteString("\nimport (\n")
		sorted := append([]string(nil), paths...)
		sort.Strings(sorted)
		for _, p := range sorted {
			fmt.Fprintf(&b, "\t_ %q\n", p)
		}
		b.WriteString(")\n")
	}
	return []byte(b.String())
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

// usesHalfOp reports whether p has an op named op with a 16-bit result.
func usesHalfOp(p *compiler.Program, op string) bool {
	for _, f := range p.Funcs() {
		for _, v := range f.Values {
			if v.Op == op && v.DType.IsHalf() {
				return true
			}
		}
	}
	return false
}

// usesHalf reports whether any value of p is stored in a 16-bit float type.
func usesHalf(p *compiler.Program) bool {
	for _, f := range p.Funcs() {
		for _, v := range f.Values {
			if v.DType.IsHalf() {
				return true
			}
		}
	}
	return false
}

// FatbinFile is the name of a generated package's committed fatbin: gzip-
// compressed, a quarter of nvcc's bytes (36 MB of fatbins in generated/
// made the working tree too large to carry to a lent GPU beside the
// bundle: scripts/gpu_bundle.sh).
func FatbinFile(pkg string) string { return pkg + ".fatbin.gz" }

// GzipFatbin compresses a fatbin as FatbinFile holds it: the best
// compression and an empty header (no name, no time), so the same fatbin
// gives the same bytes.
func GzipFatbin(fatbin []byte) ([]byte, error) {
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(fatbin); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
