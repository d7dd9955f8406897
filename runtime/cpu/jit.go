package cpu

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
*/
import "C"

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu/emu"
)

// jitFlags are the compiler flags CompileModule uses, after the
// optimisation level (jitOpt); they are part of the cache key.
// -fno-gnu-unique: the emulation's kernels are inline functions and their
// __shared__ arrays function-local statics, which g++ would otherwise bind
// as STB_GNU_UNIQUE, one object per name across every loaded module: an
// f64 kernel loaded after an f32 one of the same name would then use the
// f32 kernel's smaller arrays.
var jitFlags = []string{"-std=c++17", "-shared", "-fPIC", "-fno-gnu-unique"}

// jitOpt is the optimisation level of modules compiled at run time: -O0
// unless $NGEN_JIT_OPT names another (-O0 to -O3, -Os, -Og). These modules
// are checked, not timed: the generated packages, which the benchmarks and
// users run, are compiled by cgo at -O3. The suite compiles some 250 of
// them on a cold cache, most run for a few steps on small data, and g++'s
// time is nearly all of their cost: at -O0 an op group's module of 218
// kernels compiles in 3.9 s against 12.5 s at -O1 (5.6 s against 2.7 s
// was -O3 against -O1 on a 27-kernel LSTM module), and codegen/jit's
// tests took 183 s on a cold cache against 431 s at -O1 (session 15).
// A test that runs big models for longer (the generated packages' GPU
// forms) asks for -O1 with t.Setenv. The arithmetic: no level reassociates
// (no -ffast-math); from -O2 up g++ contracts a*b+c into an FMA where a
// function targets FMA (the emulation's AVX2 copies), and at -O0 and -O1
// it does not, so an AVX2 copy's results may differ in the last bit
// between a JIT-compiled module and a generated package. The JIT's tests
// compare modules compiled alike, or against oracles within stated
// tolerances. Time a JIT-compiled module with NGEN_JIT_OPT=-O3.
func jitOpt() (string, error) {
	switch o := os.Getenv("NGEN_JIT_OPT"); o {
	case "":
		return "-O0", nil
	case "-O0", "-O1", "-O2", "-O3", "-Os", "-Og":
		return o, nil
	default:
		return "", fmt.Errorf("NGEN_JIT_OPT=%q: want -O0, -O1, -O2, -O3, -Os or -Og", o)
	}
}

// CompileModule compiles kernels for the host at run time, for tests and
// tools; generated packages compile theirs with cgo instead.
//
// files maps file names (relative, slash-separated) to contents; entryFile
// is the one to compile and must define ngen_cpu_entry. ngen_emu.h is added
// unless files supplies its own. The shared library is cached under
// os.UserCacheDir()/ngen/cpu/<hash of inputs and flags>, so a second call
// with the same inputs, in this process or another, only loads it. The
// compiler is $CXX, or g++.
func CompileModule(name string, files map[string]string, entryFile string, kernels []runtime.KernelInfo) (*runtime.Module, error) {
	opt, err := jitOpt()
	if err != nil {
		return nil, fmt.Errorf("cpu: compile %s: %v", name, err)
	}
	return CompileModuleAt(opt, name, files, entryFile, kernels)
}

// CompileModuleAt is CompileModule at optimisation level opt (-O0 to -O3,
// -Os, -Og) whatever $NGEN_JIT_OPT says: a tool that trains with the
// module (cmd/train's run-time mixed-precision builds) asks for -O3, as
// cgo compiles the generated packages.
func CompileModuleAt(opt, name string, files map[string]string, entryFile string, kernels []runtime.KernelInfo) (*runtime.Module, error) {
	switch opt {
	case "-O0", "-O1", "-O2", "-O3", "-Os", "-Og":
	default:
		return nil, fmt.Errorf("cpu: compile %s: optimisation level %q: want -O0, -O1, -O2, -O3, -Os or -Og", name, opt)
	}
	if _, ok := files[entryFile]; !ok {
		return nil, fmt.Errorf("cpu: compile %s: entry file %q is not among the files", name, entryFile)
	}
	all := make(map[string]string, len(files)+1)
	all["ngen_emu.h"] = emu.Header
	for f, text := range files {
		if !filepath.IsLocal(f) {
			return nil, fmt.Errorf("cpu: compile %s: file name %q is not a local relative path", name, f)
		}
		all[f] = text
	}
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	args := append(append([]string{opt}, jitFlags...), "-o", "mod.so", entryFile)

	dir, err := cacheDir(cacheKey(cxx, args, all))
	if err != nil {
		return nil, fmt.Errorf("cpu: compile %s: %v", name, err)
	}
	so := filepath.Join(dir, "mod.so")
	if _, err := os.Stat(so); err != nil {
		buildArgs, buildFiles := args, all
		if inc := precompiledHeader(cxx, opt, files, entryFile); inc != "" {
			// The header comes from the precompiled one's directory: g++
			// reads ngen_emu.h.gch there instead of parsing the header
			// (about 1.3 s of every module's compile). The machine code is
			// the same, so the module's cache key does not change.
			buildArgs = append([]string{"-I", inc}, args...)
			buildFiles = files
		}
		start := time.Now()
		if err := build(dir, cxx, buildArgs, buildFiles, "mod.so"); err != nil {
			return nil, fmt.Errorf("cpu: compile %s: %v", name, err)
		}
		logCompile(name, len(kernels), time.Since(start), len(buildFiles) < len(all))
	}
	entry, err := loadEntry(so)
	if err != nil {
		return nil, fmt.Errorf("cpu: compile %s: %v", name, err)
	}
	return &runtime.Module{
		Name:     name,
		Source:   files[entryFile],
		Kernels:  append([]runtime.KernelInfo(nil), kernels...),
		CPUEntry: entry,
	}, nil
}

func cacheKey(cxx string, args []string, files map[string]string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%q %q\n", cxx, args)
	names := make([]string, 0, len(files))
	for f := range files {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		fmt.Fprintf(h, "%q %d\n%s", f, len(files[f]), files[f])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func cacheDir(key string) (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "ngen", "cpu", key)
	return dir, os.MkdirAll(dir, 0o755)
}

// build compiles in a private temporary directory and renames the
// top-level sources, then the file result, into dir, so concurrent builds
// of the same module or header (parallel test binaries) never see each
// other's half-written files.
func build(dir, cxx string, args []string, files map[string]string, result string) error {
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	for f, text := range files {
		p := filepath.Join(tmp, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return err
		}
	}
	cmd := exec.Command(cxx, args...)
	cmd.Dir = tmp
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %v\n%s", cxx, strings.Join(args, " "), err, out.String())
	}
	// The sources are kept beside mod.so for reading compiler errors and
	// profiles; only mod.so is looked for on the next call.
	for f := range files {
		if !strings.Contains(f, "/") {
			_ = os.Rename(filepath.Join(tmp, f), filepath.Join(dir, f))
		}
	}
	return os.Rename(filepath.Join(tmp, result), filepath.Join(dir, result))
}

// loadEntry dlopens so and returns its ngen_cpu_entry. The library stays
// loaded for the life of the process: modules have no unload.
func loadEntry(so string) (unsafe.Pointer, error) {
	cpath := C.CString(so)
	defer C.free(unsafe.Pointer(cpath))
	h := C.dlopen(cpath, C.RTLD_NOW|C.RTLD_LOCAL)
	if h == nil {
		return nil, fmt.Errorf("dlopen %s: %s", so, C.GoString(C.dlerror()))
	}
	sym := C.CString("ngen_cpu_entry")
	defer C.free(unsafe.Pointer(sym))
	entry := C.dlsym(h, sym)
	if entry == nil {
		return nil, fmt.Errorf("%s defines no ngen_cpu_entry", so)
	}
	return entry, nil
}

// logCompile appends one line per module compiled (not found in the cache)
// to the file $NGEN_JIT_LOG names, if any: the time, the module's name and
// kernel count, the seconds g++ took and whether the precompiled header
// served. It is how the suite's compile cost is profiled (DEVELOPERS.md).
func logCompile(name string, kernels int, took time.Duration, pch bool) {
	path := os.Getenv("NGEN_JIT_LOG")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\t%s\t%d\t%.2f\tpch=%v\n", time.Now().Format(time.RFC3339), name, kernels, took.Seconds(), pch)
}
