package cpu

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// testKernel describes one kernel of testdata/kernels.cu the way the code
// generator would: its launch mode and its parameters' C types.
type testKernel struct {
	fn     string
	sync   bool
	ctypes []string
}

// spanKernels are the grid-stride kernels, run as contiguous spans
// (NGEN_RUN_SPAN) as the generator marks its elementwise kernels.
var spanKernels = map[string]bool{"span_sqrt": true}

// soloKernels are marked KernelInfo.SoloBlocks.
var soloKernels = map[string]bool{"block_width": true}

// Kernel indices into testKernels.
const (
	kAddRelu = iota
	kAddReluSync
	kAxpyF64
	kSumRowsTree
	kSumWarpShuffle
	kShuffleProbe
	kEarlyExitSync
	kHistogram
	kAtomicSumMax
	kDivergentSync
	kWarpBlockDeadlock
	kSyncInSimple
	kMathProbe
	kSpanSqrt
	kWarpReduceProbe
	kBlockWidth
)

var testKernels = []testKernel{
	kAddRelu:           {"add_relu_fwd", false, []string{"const float *", "const float *", "float *", "int"}},
	kAddReluSync:       {"add_relu_fwd", true, []string{"const float *", "const float *", "float *", "int"}},
	kAxpyF64:           {"axpy_f64", false, []string{"double", "const double *", "double *", "long long"}},
	kSumRowsTree:       {"sum_rows_tree", true, []string{"const float *", "float *", "int"}},
	kSumWarpShuffle:    {"sum_warp_shuffle", true, []string{"const float *", "float *", "int"}},
	kShuffleProbe:      {"shuffle_probe", true, []string{"int *", "double *"}},
	kEarlyExitSync:     {"early_exit_sync", true, []string{"int *", "int"}},
	kHistogram:         {"histogram", false, []string{"const int *", "unsigned *", "int"}},
	kAtomicSumMax:      {"atomic_sum_max", false, []string{"const double *", "double *", "int *", "int"}},
	kDivergentSync:     {"divergent_sync", true, []string{"float *"}},
	kWarpBlockDeadlock: {"warp_block_deadlock", true, []string{"float *"}},
	// A barrier kernel wrongly marked Sync=false.
	kSyncInSimple:    {"divergent_sync", false, []string{"float *"}},
	kMathProbe:       {"math_probe", false, []string{"const float *", "float *", "double *", "unsigned *", "int"}},
	kSpanSqrt:        {"span_sqrt", false, []string{"const float *", "float *", "long long"}},
	kWarpReduceProbe: {"warp_reduce_probe", true, []string{"const float *", "float *"}},
	kBlockWidth:      {"block_width", true, []string{"int *"}},
}

func argKind(ctype string) runtime.ArgKind {
	switch {
	case strings.HasSuffix(ctype, "*"):
		return runtime.ArgPtr
	case ctype == "int" || ctype == "unsigned":
		return runtime.ArgI32
	case ctype == "long long":
		return runtime.ArgI64
	case ctype == "unsigned long long":
		return runtime.ArgU64
	case ctype == "float":
		return runtime.ArgF32
	case ctype == "double":
		return runtime.ArgF64
	}
	panic("unknown C type " + ctype)
}

// entrySource writes the launchers and the ngen_cpu_entry that the code
// generator would emit for ks (codegen.HostGlue).
func entrySource(include string, ks []testKernel) (string, []runtime.KernelInfo) {
	var b, sw strings.Builder
	fmt.Fprintf(&b, "#include \"ngen_emu.h\"\n#include %q\n", include)
	infos := make([]runtime.KernelInfo, len(ks))
	for i, k := range ks {
		args := make([]string, len(k.ctypes))
		info := runtime.KernelInfo{Name: k.fn, Sync: k.sync, GridStride: spanKernels[k.fn], SoloBlocks: soloKernels[k.fn]}
		for j, ct := range k.ctypes {
			args[j] = fmt.Sprintf("NGEN_ARG(l, %s, %d)", ct, j)
			info.Params = append(info.Params, argKind(ct))
		}
		mode := "NGEN_RUN_SIMPLE"
		switch {
		case k.sync:
			mode, info.Run = "NGEN_RUN_SYNC", runtime.RunFibers
		case spanKernels[k.fn]:
			mode, info.Run = "NGEN_RUN_SPAN", runtime.RunSpan
		}
		fmt.Fprintf(&b, "NGEN_EMU_LAUNCHER int launch_%d(const ngen_launch *l) { %s(l, %s(%s)); }\n", i, mode, k.fn, strings.Join(args, ", "))
		fmt.Fprintf(&sw, "  case %d: return launch_%d(l);\n", i, i)
		infos[i] = info
	}
	b.WriteString("extern \"C\" int ngen_cpu_entry(int k, const ngen_launch *l) {\n  switch (k) {\n")
	b.WriteString(sw.String())
	b.WriteString("  }\n  return -1;\n}\n")
	return b.String(), infos
}

var (
	testModOnce sync.Once
	testMod     *runtime.Module
	testModErr  error
)

// testModule compiles testdata/kernels.cu once per test binary.
func testModule(t testing.TB) *runtime.Module {
	t.Helper()
	testModOnce.Do(func() {
		src, err := os.ReadFile("testdata/kernels.cu")
		if err != nil {
			testModErr = err
			return
		}
		entry, infos := entrySource("kernels.cu", testKernels)
		testMod, testModErr = CompileModule("testkernels",
			map[string]string{"kernels.cu": string(src), "entry.cc": entry}, "entry.cc", infos)
	})
	if testModErr != nil {
		t.Fatal(testModErr)
	}
	return testMod
}

// newTestDevice returns a device with two workers, so that even on a
// one-core machine blocks run on two OS threads at once.
func newTestDevice(t testing.TB) (*Device, runtime.Loaded) {
	t.Helper()
	return newTestDeviceOpts(t, Options{Threads: 2})
}

func newTestDeviceOpts(t testing.TB, opts Options) (*Device, runtime.Loaded) {
	t.Helper()
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	l, err := d.Load(testModule(t))
	if err != nil {
		t.Fatal(err)
	}
	return d, l
}

// upload allocates device memory holding xs.
func upload[T any](t testing.TB, d *Device, xs []T) runtime.Ptr {
	t.Helper()
	n := int64(len(xs)) * int64(unsafe.Sizeof(*new(T)))
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyToDevice(p, unsafe.Pointer(unsafe.SliceData(xs)), n); err != nil {
		t.Fatal(err)
	}
	return p
}

// download reads n elements from p.
func download[T any](t testing.TB, d *Device, p runtime.Ptr, n int) []T {
	t.Helper()
	xs := make([]T, n)
	if err := d.CopyToHost(unsafe.Pointer(unsafe.SliceData(xs)), p, int64(n)*int64(unsafe.Sizeof(*new(T)))); err != nil {
		t.Fatal(err)
	}
	return xs
}

func launch(t testing.TB, d *Device, l runtime.Loaded, k int, grid, block runtime.Dim3, shared int, args ...runtime.Arg) {
	t.Helper()
	if err := d.Launch(l.Function(k), grid, block, shared, args...); err != nil {
		t.Fatal(err)
	}
}
