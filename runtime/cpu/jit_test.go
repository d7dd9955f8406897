package cpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu/emu"
)

// TestNvccCompilesTestKernels keeps testdata honest: the kernels the CPU
// backend is tested on must be real CUDA.
func TestNvccCompilesTestKernels(t *testing.T) {
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		t.Skip("nvcc not on PATH: skipping the check that testdata/*.cu is valid CUDA")
	}
	files, _ := filepath.Glob("testdata/*.cu")
	for _, f := range files {
		out, err := exec.Command(nvcc, "-arch=sm_80", "-c", f, "-o", filepath.Join(t.TempDir(), "k.o")).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("nvcc %s: %v\n%s", f, err, out)
		}
	}
}

// unusedParams is a kernel that ignores some parameters, as generated
// kernels sometimes do; the header must not make that a warning.
const unusedParams = `
__global__ void ignores_args(const float *x, float *y, int n, double unused) {
  if (threadIdx.x == 0 && blockIdx.x == 0) y[0] = x[0];
}
`

// TestHeaderCompilesWithoutWarnings compiles the test kernels and their
// entry with every warning the brief promises to stay clean under, for both
// context-switch implementations.
func TestHeaderCompilesWithoutWarnings(t *testing.T) {
	src, err := os.ReadFile("testdata/kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	ks := append(testKernels[:len(testKernels):len(testKernels)],
		testKernel{"ignores_args", false, []string{"const float *", "float *", "int", "double"}})
	entry, _ := entrySource("kernels.cu", ks)
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ngen_emu.h", emu.Header)
	write("kernels.cu", string(src)+unusedParams)
	write("entry.cc", entry)
	for _, extra := range [][]string{nil, {"-DNGEN_EMU_UCONTEXT"}} {
		args := append([]string{"-std=c++17", "-O3", "-Wall", "-Wextra", "-fPIC", "-c", "entry.cc", "-o", "entry.o"}, extra...)
		cmd := exec.Command("g++", args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("g++ %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestUcontextFallback runs the barrier and shuffle kernels on the portable
// swapcontext path, which non-x86-64 hosts use.
func TestUcontextFallback(t *testing.T) {
	src, err := os.ReadFile("testdata/kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	entry, infos := entrySource("kernels.cu", testKernels)
	m, err := CompileModule("testkernels_ucontext", map[string]string{
		"kernels.cu": string(src), "entry.cc": "#define NGEN_EMU_UCONTEXT 1\n" + entry}, "entry.cc", infos)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l, err := d.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	const n, blocks = 4099, 3
	x := make([]float32, n)
	var want float32
	for i := range x {
		x[i] = float32(i % 7)
		want += x[i]
	}
	px, pout := upload(t, d, x), upload(t, d, make([]float32, blocks))
	launch(t, d, l, kSumWarpShuffle, runtime.Dim3{X: blocks, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}, 0, px, pout, int32(n))
	var got float32
	for _, v := range download[float32](t, d, pout, blocks) {
		got += v
	}
	if got != want {
		t.Errorf("sum = %v, want %v", got, want)
	}
	err = d.Launch(l.Function(kDivergentSync), runtime.Dim3{X: 1, Y: 1, Z: 1}, runtime.Dim3{X: 64, Y: 1, Z: 1}, 0, pout)
	if err == nil || !strings.Contains(err.Error(), "deadlock") {
		t.Errorf("divergent __syncthreads: err = %v", err)
	}
}

func TestCompileErrorsAreReported(t *testing.T) {
	_, err := CompileModule("broken", map[string]string{"entry.cc": "int f() { return undeclared_name; }\n"}, "entry.cc", nil)
	if err == nil || !strings.Contains(err.Error(), "undeclared_name") {
		t.Errorf("err = %v, want the compiler's message", err)
	}
	_, err = CompileModule("noentry", map[string]string{"entry.cc": "int f() { return 0; }\n"}, "entry.cc", nil)
	if err == nil || !strings.Contains(err.Error(), "ngen_cpu_entry") {
		t.Errorf("err = %v, want a missing ngen_cpu_entry error", err)
	}
	if _, err = CompileModule("m", map[string]string{"a.cc": ""}, "b.cc", nil); err == nil {
		t.Error("missing entry file accepted")
	}
	if _, err = CompileModule("m", map[string]string{"../a.cc": ""}, "../a.cc", nil); err == nil {
		t.Error("non-local file name accepted")
	}
}
