//go:build cuda

package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gorgonia.org/cu"
	"gorgonia.org/cu/nvrtc"

	"github.com/ngen-ml/ngen/runtime"
)

// loaded is a module loaded on a Device.
type loaded struct {
	dev   *Device
	mod   *runtime.Module
	cuMod cu.Module
	from  string // "fatbin", "PTX" or "NVRTC PTX"
	funcs []*function
}

// From says which form of the module was loaded: "fatbin", "PTX" (from
// nvcc, at generation time) or "NVRTC PTX" (compiled by Load).
func (l *loaded) From() string { return l.from }

// Function returns kernel i. An index out of range yields a Function whose
// launches fail, since the interface has no error to return here.
func (l *loaded) Function(i int) runtime.Function {
	if i < 0 || i >= len(l.funcs) {
		name := fmt.Sprintf("%s.kernel[%d]", l.mod.Name, i)
		return &function{mod: l, info: runtime.KernelInfo{Name: name},
			err: fmt.Errorf("cuda: module %q has %d kernels, no kernel %d", l.mod.Name, len(l.funcs), i)}
	}
	return l.funcs[i]
}

// Load loads the first form of m that the device accepts: the fatbin (if it
// holds SASS or PTX this device runs), else nvcc's PTX (JIT-compiled by the
// driver), else m.Source compiled now by NVRTC for this device's compute
// capability, with the PTX cached on disk. Every kernel of m.Kernels is
// resolved here, so a missing one is a Load error.
func (d *Device) Load(m *runtime.Module) (runtime.Loaded, error) {
	if m == nil {
		return nil, fmt.Errorf("cuda: load of a nil module")
	}
	var tried []string
	l := &loaded{dev: d, mod: m}
	try := func(from, image, ptx string) error {
		err := d.do(func() error { return l.load(from, image, ptx) })
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", from, err))
		}
		return err
	}
	for _, form := range loadForms(m) {
		switch form {
		case "fatbin":
			img, err := m.FatbinImage()
			if err != nil {
				tried = append(tried, fmt.Sprintf("%s: %v", form, err))
			} else if try(form, string(img), m.PTX) == nil {
				return l, nil
			}
		case "PTX":
			if try(form, m.PTX, m.PTX) == nil {
				return l, nil
			}
		case "NVRTC PTX":
			if errors.Is(d.closedOr(nil), errClosed) {
				return nil, errClosed
			}
			ptx, err := compileNVRTC(m.Name, m.Source, d.info.Major, d.info.Minor)
			if err != nil {
				tried = append(tried, err.Error())
			} else if try(form, ptx, ptx) == nil {
				return l, nil
			}
		}
	}
	if len(tried) == 0 {
		return nil, fmt.Errorf("cuda: load %s: the module has no fatbin, PTX or source", m.Name)
	}
	return nil, fmt.Errorf("cuda: load %s on %s: %s", m.Name, d.info.Name, strings.Join(tried, "; "))
}

// loadForms lists the forms of m that Load tries, in order: nvcc's fatbin
// and PTX when the package was generated with nvcc, and the source through
// NVRTC, which is all a package generated without nvcc carries.
func loadForms(m *runtime.Module) []string {
	var forms []string
	if len(m.Fatbin) > 0 || len(m.FatbinGz) > 0 {
		forms = append(forms, "fatbin")
	}
	if m.PTX != "" {
		forms = append(forms, "PTX")
	}
	if m.Source != "" {
		forms = append(forms, "NVRTC PTX")
	}
	return forms
}

// load runs on the device thread. ptx, when not empty, is the PTX text the
// image was built from; kernel names are looked up in it when the generated
// kernels are C++ (mangled) rather than extern "C".
func (l *loaded) load(from, image, ptx string) error {
	mod, err := cu.LoadData(image)
	if err != nil {
		return fmt.Errorf("cuModuleLoadData: %v", err)
	}
	entries := ptxEntries(ptx)
	funcs := make([]*function, len(l.mod.Kernels))
	for i, k := range l.mod.Kernels {
		fn, err := mod.Function(k.Name)
		if err != nil {
			if sym := mangledEntry(k.Name, entries); sym != "" {
				fn, err = mod.Function(sym)
			}
		}
		if err != nil {
			mod.Unload()
			return fmt.Errorf("kernel %d %q: cuModuleGetFunction: %v", i, k.Name, err)
		}
		funcs[i] = &function{mod: l, info: k, fn: fn}
	}
	l.cuMod, l.from, l.funcs = mod, from, funcs
	return nil
}

var ptxEntryRE = regexp.MustCompile(`(?m)^\s*\.(?:visible\s+)?\.entry\s+([A-Za-z_$][\w$]*)`)

// ptxEntries lists the kernel symbols a PTX text defines.
func ptxEntries(ptx string) []string {
	var names []string
	for _, m := range ptxEntryRE.FindAllStringSubmatch(ptx, -1) {
		names = append(names, m[1])
	}
	return names
}

// mangledEntry finds the Itanium-mangled symbol of a C++ __global__ function
// named name: _Z<len><name> followed by its parameter types. Overloads would
// be ambiguous; generated kernels have unique names.
func mangledEntry(name string, entries []string) string {
	prefix := fmt.Sprintf("_Z%d%s", len(name), name)
	for _, e := range entries {
		if strings.HasPrefix(e, prefix) {
			return e
		}
	}
	return ""
}

// nvrtcArch is the virtual architecture NVRTC compiles for: the device's,
// capped at the newest this NVRTC knows (PTX JIT-compiles forward, so a
// newer device still runs it).
func nvrtcArch(major, minor, nvMajor, nvMinor int) string {
	cc := major*10 + minor
	var newest int
	switch v := nvMajor*10 + nvMinor; {
	case v >= 128:
		newest = 120
	case v >= 118:
		newest = 90
	case v >= 111:
		newest = 86
	default:
		newest = 80
	}
	return fmt.Sprintf("compute_%d", min(cc, newest))
}

// compileNVRTC compiles source to PTX for the device, through a cache in
// os.UserCacheDir()/ngen/nvrtc keyed by the source, options and NVRTC
// version, so only the first start-up of a model pays for compilation.
func compileNVRTC(name, source string, major, minor int) (string, error) {
	nvMajor, nvMinor, err := nvrtc.Version()
	if err != nil {
		return "", fmt.Errorf("NVRTC: version: %v", err)
	}
	// The flags of codegen.NVCCFlags: fmad contraction and denormals flushed
	// to zero, so NVRTC builds compute what nvcc's do, and line information
	// for profilers. (-O3 is nvcc's host optimisation; NVRTC has no host code.)
	opts := nvrtcOptions(nvrtcArch(major, minor, nvMajor, nvMinor), source)
	h := sha256.New()
	fmt.Fprintf(h, "nvrtc %d.%d %q\n%s", nvMajor, nvMinor, opts, source)
	key := hex.EncodeToString(h.Sum(nil))
	path := ""
	if base, err := os.UserCacheDir(); err == nil {
		path = filepath.Join(base, "ngen", "nvrtc", key+".ptx")
		if ptx, err := os.ReadFile(path); err == nil {
			return string(ptx), nil
		}
	}
	ptx, err := runNVRTC(name, source, opts)
	if err != nil {
		return "", err
	}
	if path != "" {
		writeCache(path, ptx) // a cache that cannot be written only costs time
	}
	return ptx, nil
}

// nvrtcOptions are the backend's NVRTC flags for arch, those of
// codegen.NVCCFlags (see compileNVRTC), and, for a module that includes
// CUDA's 16-bit headers (mixed precision), the directory that holds
// them: NVRTC searches no directory of its own.
func nvrtcOptions(arch, source string) []string {
	opts := []string{"--gpu-architecture=" + arch, "--fmad=true", "--ftz=true", "--generate-line-info"}
	if strings.Contains(source, "<cuda_bf16.h>") || strings.Contains(source, "<cuda_fp16.h>") {
		if dir := cudaIncludeDir(); dir != "" {
			opts = append(opts, "--include-path="+dir)
		}
	}
	return opts
}

// cudaIncludeDir is the first of $CUDA_PATH/include, $CUDA_HOME/include,
// /usr/local/cuda/include and /usr/include (Debian's toolkit) that holds
// cuda_bf16.h, or "".
func cudaIncludeDir() string {
	var dirs []string
	for _, env := range []string{"CUDA_PATH", "CUDA_HOME"} {
		if v := os.Getenv(env); v != "" {
			dirs = append(dirs, filepath.Join(v, "include"))
		}
	}
	for _, d := range append(dirs, "/usr/local/cuda/include", "/usr/include") {
		if _, err := os.Stat(filepath.Join(d, "cuda_bf16.h")); err == nil {
			return d
		}
	}
	return ""
}

func runNVRTC(name, source string, opts []string) (string, error) {
	prog, err := nvrtc.CreateProgram(source, name+".cu")
	if err != nil {
		return "", fmt.Errorf("NVRTC: create program: %v", err)
	}
	defer prog.Destroy()
	if err := prog.Compile(opts...); err != nil {
		log, _ := prog.GetLog()
		return "", fmt.Errorf("NVRTC %s: %v:\n%s", strings.Join(opts, " "), err, strings.TrimSpace(log))
	}
	ptx, err := prog.GetPTX()
	if err != nil {
		return "", fmt.Errorf("NVRTC: get PTX: %v", err)
	}
	return ptx, nil
}

// writeCache writes through a temporary file and a rename, so a concurrent
// reader never sees half a file.
func writeCache(path, text string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "tmp-*.ptx")
	if err != nil {
		return err
	}
	_, werr := f.WriteString(text)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}
