package cpu

import (
	"fmt"
	"strings"

	"github.com/ngen-ml/ngen/runtime"
)

// GPU forms (Options.GPUForms). The entry a generated package builds with
// cgo compiles the kernels against the emulation's own loop and reduction
// forms: NGEN_GRID_STRIDE walks a worker's span with unit stride and
// ngen_warp_sum reduces a warp in one barrier. Those are faster on a CPU,
// but they are not the code a GPU runs, so a bug in the GPU forms (a
// grid-stride bound, a butterfly's offsets) would pass every CPU test.
//
// A device with GPUForms set therefore compiles the module's CUDA source
// (runtime.Module.Source, the same text NVRTC compiles) at load time with
// NGEN_EMU_GPU_FORMS defined: the preamble's GPU definitions are compiled
// as written, every kernel runs grid × block real threads (fibers where it
// synchronises), __shfl_xor_sync and its kin exchange registers between the
// 32 lanes of a warp at a warp barrier, and every kernel gets the block its
// launch description asks for. The entry is built from the module's
// KernelInfo, so any module with a Source runs in this mode, generated
// packages and codegen/jit's alike, and a generated package needs no
// second glue file: the compile happens here, once per source (cached by
// CompileModule), and only for devices that ask for it.

// gpuFormsMaxShared is the dynamic shared memory a kernel gets on a GPU
// without opting in through cuFuncSetAttribute, which the CUDA backend
// cannot do (docs/GPU.md).
const gpuFormsMaxShared = 48 << 10

// gpuFormsMaxGridYZ is CUDA's limit on gridDim.y and gridDim.z.
const gpuFormsMaxGridYZ = 65535

// gpuFormsEntry renders the C++ file that compiles src (saved as cuFile)
// with the GPU forms and defines ngen_cpu_entry over kernels.
func gpuFormsEntry(cuFile string, kernels []runtime.KernelInfo) (string, error) {
	var b strings.Builder
	b.WriteString("// Runs the GPU forms of " + cuFile + " on the host (runtime/cpu, Options.GPUForms).\n")
	b.WriteString("#define NGEN_EMU 1\n#define NGEN_EMU_GPU_FORMS 1\n#include \"ngen_emu.h\"\n")
	// In an unnamed namespace, as codegen.CPUGlue does: otherwise a
	// kernel's __shared__ arrays (static thread_locals of an inline
	// function) are one GNU unique symbol across every loaded module, sized
	// by whichever module with that kernel name came first.
	fmt.Fprintf(&b, "namespace {\n#include %q\n} // namespace\n\n", cuFile)
	b.WriteString("extern \"C\" int ngen_cpu_entry(int k, const ngen_launch *l) {\n  switch (k) {\n")
	kinds := map[runtime.ArgKind]string{runtime.ArgI32: "int", runtime.ArgI64: "long long",
		runtime.ArgU64: "unsigned long long", runtime.ArgF32: "float", runtime.ArgF64: "double"}
	for i, ki := range kernels {
		if !cIdent(ki.Name) {
			return "", fmt.Errorf("kernel %d: name %q is not a C identifier", i, ki.Name)
		}
		var args []string
		for j, kind := range ki.Params {
			if kind == runtime.ArgPtr {
				// The pointee type is the kernel's to say; KernelInfo
				// knows only that this is a pointer.
				args = append(args, fmt.Sprintf("NGEN_PTR_ARG(l, %d)", j))
				continue
			}
			t, ok := kinds[kind]
			if !ok {
				return "", fmt.Errorf("kernel %s: parameter %d has unknown kind %d", ki.Name, j, int(kind))
			}
			args = append(args, fmt.Sprintf("NGEN_ARG(l, %s, %d)", t, j))
		}
		run := "NGEN_RUN_SIMPLE"
		if ki.Sync {
			run = "NGEN_RUN_SYNC"
		}
		fmt.Fprintf(&b, "  case %d: %s(l, %s(%s));\n", i, run, ki.Name, strings.Join(args, ", "))
	}
	b.WriteString("  }\n  return -1;\n}\n")
	return b.String(), nil
}

func cIdent(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		if c != '_' && !('a' <= c && c <= 'z') && !('A' <= c && c <= 'Z') && (i == 0 || !('0' <= c && c <= '9')) {
			return false
		}
	}
	return true
}

// gpuFormsModule compiles m's CUDA source with the GPU forms.
func gpuFormsModule(m *runtime.Module) (*runtime.Module, error) {
	if m.Source == "" {
		return nil, fmt.Errorf("cpu: load %s with GPUForms: the module has no CUDA source to compile", m.Name)
	}
	entry, err := gpuFormsEntry("model.cu", m.Kernels)
	if err != nil {
		return nil, fmt.Errorf("cpu: load %s with GPUForms: %v", m.Name, err)
	}
	files := map[string]string{"model.cu": m.Source, "gpu_forms.cc": entry}
	g, err := CompileModule(m.Name, files, "gpu_forms.cc", m.Kernels)
	if err != nil {
		return nil, err
	}
	g.Source = m.Source
	return g, nil
}

// checkGPUShape rejects what a GPU would reject at launch and the host
// would not: a grid too tall or deep, and more dynamic shared memory than
// a kernel gets without opting in.
func checkGPUShape(grid runtime.Dim3, sharedBytes int) error {
	if grid.Y > gpuFormsMaxGridYZ || grid.Z > gpuFormsMaxGridYZ {
		return fmt.Errorf("grid %v: a GPU allows at most %d blocks in y and z", grid, gpuFormsMaxGridYZ)
	}
	if sharedBytes > gpuFormsMaxShared {
		return fmt.Errorf("%d bytes of dynamic shared memory: a GPU kernel gets at most %d without opting in", sharedBytes, gpuFormsMaxShared)
	}
	return nil
}
