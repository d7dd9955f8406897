// Package scanemu tests the CPU emulation's helpers for the recurrences
// (a package of its own: runtime/cpu's tests build every generated package).
package scanemu

import (
	"math"
	"strings"
	"testing"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// The emulation's helpers for the recurrences' per-step-GEMM form
// (compiler/ops/recur_fast.go): NGEN_RUN_OWN_STACK, the GEMM library found by
// name, and the vectorisable f32 exp, logistic and tanh.
const scanEmuSrc = `
__global__ void solo_sync(int *out) {
  // A one-thread block's barrier counts its own predicate and its warp
  // sum is its own value; under NGEN_RUN_OWN_STACK neither is a misuse.
  const int c = __syncthreads_count(1);
  __syncthreads();
  const float w = ngen_warp_sum(2.5f);
  if (blockIdx.x == 0) {
    out[0] = c;
    out[1] = w == 2.5f;
    out[2] = ::ngen_emu::gemm_syms().s != nullptr;
    out[3] = ::ngen_emu::gemm_syms().d != nullptr;
  }
}
__global__ void scan_math(const float *x, float *o, int n) {
  for (int i = 0; i < n; i++) {
    o[3 * i] = ::ngen_emu::fast_expf(x[i]);
    o[3 * i + 1] = ::ngen_emu::fast_sigmoidf(x[i]);
    o[3 * i + 2] = ::ngen_emu::fast_tanhf(x[i]);
  }
}
// c = a·bᵀ (f32, a m×k, b n×k) and d = p·q (f64, p m×k, q k×n).
__global__ void scan_gemm(const float *a, const float *b, float *c, const double *p, const double *q, double *d, int m, int n, int k) {
  ::ngen_emu::gemm(false, true, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n);
  ::ngen_emu::gemm(false, false, m, n, k, 1.0, p, k, q, n, 0.0, d, n);
}
`

func scanEmuModule(t *testing.T) (*cpu.Device, runtime.Loaded) {
	t.Helper()
	entry := "#define NGEN_EMU 1\n#include \"ngen_emu.h\"\nnamespace {\n#include \"scan.cu\"\n}\n" +
		"extern \"C\" int ngen_cpu_entry(int k, const ngen_launch *l) {\n  switch (k) {\n" +
		"  case 0: NGEN_RUN_OWN_STACK(l, solo_sync(NGEN_ARG(l, int *, 0)));\n" +
		"  case 1: NGEN_RUN_SIMPLE(l, scan_math(NGEN_ARG(l, const float *, 0), NGEN_ARG(l, float *, 1), NGEN_ARG(l, int, 2)));\n" +
		"  case 2: NGEN_RUN_SIMPLE(l, scan_gemm(NGEN_ARG(l, const float *, 0), NGEN_ARG(l, const float *, 1), NGEN_ARG(l, float *, 2), " +
		"NGEN_ARG(l, const double *, 3), NGEN_ARG(l, const double *, 4), NGEN_ARG(l, double *, 5), NGEN_ARG(l, int, 6), NGEN_ARG(l, int, 7), NGEN_ARG(l, int, 8)));\n" +
		"  case 3: NGEN_RUN_OWN_STACK(l, solo_sync(NGEN_ARG(l, int *, 0)));\n" +
		"  }\n  return -1;\n}\n"
	P := runtime.ArgPtr
	infos := []runtime.KernelInfo{
		{Name: "solo_sync", Sync: true, SoloBlocks: true, Params: []runtime.ArgKind{P}},
		{Name: "scan_math", Params: []runtime.ArgKind{P, P, runtime.ArgI32}},
		{Name: "scan_gemm", Params: []runtime.ArgKind{P, P, P, P, P, P, runtime.ArgI32, runtime.ArgI32, runtime.ArgI32}},
		// solo_sync again, launched with its real block (the device
		// gives a SoloBlocks kernel one-thread blocks).
		{Name: "solo_sync", Sync: true, Params: []runtime.ArgKind{P}},
	}
	m, err := cpu.CompileModule("scanemu", map[string]string{"scan.cu": scanEmuSrc, "entry.cc": entry}, "entry.cc", infos)
	if err != nil {
		t.Fatal(err)
	}
	d, err := cpu.New(cpu.Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	l, err := d.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	return d, l
}

func TestScanEmuHelpers(t *testing.T) {
	d, l := scanEmuModule(t)
	one := runtime.Dim3{X: 1, Y: 1, Z: 1}

	// NGEN_RUN_OWN_STACK: one-thread blocks without fibers; and the GEMM
	// library is found in this process (else the recurrences would fall
	// back to a plain loop, correct but slow).
	out := upload(t, d, make([]int32, 4))
	launch(t, d, l, 0, runtime.Dim3{X: 3, Y: 1, Z: 1}, one, 0, out)
	if got := download[int32](t, d, out, 4); got[0] != 1 || got[1] != 1 || got[2] != 1 || got[3] != 1 {
		t.Errorf("solo_sync: count %d, warp sum ok %d, dnnl_sgemm found %d, cblas_dgemm found %d; want all 1", got[0], got[1], got[2], got[3])
	}
	// A real block is refused: the host glue runs the CUDA form, with
	// fibers, for those (KernelInfo.Run).
	if err := d.Launch(l.Function(3), one, runtime.Dim3{X: 64, Y: 1, Z: 1}, 0, out); err == nil || !strings.Contains(err.Error(), "bad launch") {
		t.Errorf("solo_sync with 64 threads under NGEN_RUN_OWN_STACK: %v, want a bad launch", err)
	}

	// exp, logistic and tanh within a few ulp over the cells' range and
	// beyond it (exp's argument is clamped to ±87).
	var xs []float32
	for x := -100.0; x <= 100; x += 0.0137 {
		xs = append(xs, float32(x))
	}
	xs = append(xs, 0, 1e-30, -1e-30, 0.625, -0.625, 87, -87)
	px, po := upload(t, d, xs), upload(t, d, make([]float32, 3*len(xs)))
	launch(t, d, l, 1, one, one, 0, px, po, int32(len(xs)))
	o := download[float32](t, d, po, 3*len(xs))
	for i, x32 := range xs {
		x := float64(x32)
		want := []float64{math.Exp(x), 1 / (1 + math.Exp(-x)), math.Tanh(x)}
		for j, w := range want {
			if j == 0 && math.Abs(x) > 87 {
				continue
			}
			tol := 4e-7 * math.Abs(w)
			if j == 1 {
				tol += 1e-37 // below exp's clamp the logistic underflows differently
			}
			if got := float64(o[3*i+j]); math.Abs(got-w) > tol || math.IsNaN(got) {
				t.Errorf("x=%v: function %d = %v, want %v", x, j, got, w)
			}
		}
	}

	// The GEMMs, f32 (NT) and f64 (NN), on odd sizes.
	const m, n, k = 5, 7, 3
	a, b := make([]float32, m*k), make([]float32, n*k)
	p, q := make([]float64, m*k), make([]float64, k*n)
	for i := range a {
		a[i], p[i] = float32(i%7)-2.5, float64(i%5)-1.25
	}
	for i := range b {
		b[i], q[i] = float32(i%3)+0.5, float64(i%4)-0.75
	}
	pc, pd := upload(t, d, make([]float32, m*n)), upload(t, d, make([]float64, m*n))
	launch(t, d, l, 2, one, one, 0, upload(t, d, a), upload(t, d, b), pc, upload(t, d, p), upload(t, d, q), pd, int32(m), int32(n), int32(k))
	c, dd := download[float32](t, d, pc, m*n), download[float64](t, d, pd, m*n)
	for i := range m {
		for j := range n {
			var sc float32
			var sd float64
			for r := range k {
				sc += a[i*k+r] * b[j*k+r]
				sd += p[i*k+r] * q[r*n+j]
			}
			if c[i*n+j] != sc || dd[i*n+j] != sd { // small integers and halves: exact
				t.Errorf("gemm [%d,%d] = %v, %v; want %v, %v", i, j, c[i*n+j], dd[i*n+j], sc, sd)
			}
		}
	}
}

func upload[T any](t *testing.T, d *cpu.Device, xs []T) runtime.Ptr {
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

func download[T any](t *testing.T, d *cpu.Device, p runtime.Ptr, n int) []T {
	t.Helper()
	xs := make([]T, n)
	if err := d.CopyToHost(unsafe.Pointer(unsafe.SliceData(xs)), p, int64(n)*int64(unsafe.Sizeof(*new(T)))); err != nil {
		t.Fatal(err)
	}
	return xs
}

func launch(t *testing.T, d *cpu.Device, l runtime.Loaded, k int, grid, block runtime.Dim3, shared int, args ...runtime.Arg) {
	t.Helper()
	if err := d.Launch(l.Function(k), grid, block, shared, args...); err != nil {
		t.Fatal(err)
	}
}
