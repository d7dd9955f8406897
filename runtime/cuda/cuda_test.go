//go:build cuda

package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// newDevice returns device 0, or skips the test with one line saying why
// there is none. cu's package init cannot kill the test binary first:
// initguard.c keeps it alive and records cuInit's result for Available.
func newDevice(t *testing.T) *Device {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no GPU: %v", err)
	}
	d, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// TestNoDevice checks, on a machine without a GPU, that the process is
// still alive and every entry point says why.
func TestNoDevice(t *testing.T) {
	avail := Available()
	if avail == nil {
		t.Skip("a GPU is present")
	}
	if !errors.Is(avail, ErrNoDevice) {
		t.Fatalf("Available() = %v, which does not wrap ErrNoDevice", avail)
	}
	if _, err := New(Options{}); !errors.Is(err, ErrNoDevice) {
		t.Errorf("New: %v, want an error wrapping ErrNoDevice", err)
	}
	if _, err := Devices(); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Devices: %v, want an error wrapping ErrNoDevice", err)
	}
}

func TestSizeClass(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{1, 512}, {512, 512}, {513, 1024}, {1 << 20, 1 << 20}, {1<<20 + 1, 2 << 20}, {5 << 20, 6 << 20},
	} {
		if got := sizeClass(c.n); got != c.want {
			t.Errorf("sizeClass(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

// testSource has one extern "C" kernel and one C++ kernel, whose symbol is
// mangled, so Load's name resolution is exercised both ways.
const testSource = `
extern "C" __global__ void axpy_f32(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

__global__ void fill_f64(double v, double *y, long long n, unsigned long long stride) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i * stride] = v;
}
`

var testKernels = []runtime.KernelInfo{
	{Name: "axpy_f32", Params: []runtime.ArgKind{runtime.ArgF32, runtime.ArgPtr, runtime.ArgPtr, runtime.ArgI32}},
	{Name: "fill_f64", Params: []runtime.ArgKind{runtime.ArgF64, runtime.ArgPtr, runtime.ArgI64, runtime.ArgU64}},
}

// TestNVRTC needs libnvrtc but no GPU.
func TestNVRTC(t *testing.T) {
	ptx, err := compileNVRTC("test", testSource, 8, 0)
	if err != nil {
		t.Fatal(err)
	}
	entries := ptxEntries(ptx)
	if len(entries) != 2 {
		t.Fatalf("PTX entries %q, want 2", entries)
	}
	for _, k := range testKernels {
		if k.Name == "axpy_f32" {
			if entries[0] != "axpy_f32" && entries[1] != "axpy_f32" {
				t.Errorf("extern \"C\" kernel axpy_f32 not among %q", entries)
			}
			continue
		}
		if sym := mangledEntry(k.Name, entries); !strings.HasPrefix(sym, "_Z8fill_f64") {
			t.Errorf("mangledEntry(%q, %q) = %q", k.Name, entries, sym)
		}
	}
	// The second compile must come from the disk cache and agree.
	again, err := compileNVRTC("test", testSource, 8, 0)
	if err != nil || again != ptx {
		t.Errorf("cached compile differs (err %v)", err)
	}
	if _, err := compileNVRTC("bad", "__global__ void k() { undeclared(); }", 8, 0); err == nil || !strings.Contains(err.Error(), "undeclared") {
		t.Errorf("compile error %v does not quote NVRTC's log", err)
	}
}

func TestNVRTCArch(t *testing.T) {
	for _, c := range []struct {
		major, minor, nvMajor, nvMinor int
		want                           string
	}{{8, 0, 11, 8, "compute_80"}, {9, 0, 11, 8, "compute_90"}, {10, 0, 11, 8, "compute_90"}, {8, 6, 11, 0, "compute_80"}} {
		if got := nvrtcArch(c.major, c.minor, c.nvMajor, c.nvMinor); got != c.want {
			t.Errorf("nvrtcArch(%d.%d, NVRTC %d.%d) = %s, want %s", c.major, c.minor, c.nvMajor, c.nvMinor, got, c.want)
		}
	}
}

func upload[T any](t *testing.T, d *Device, v []T) runtime.Ptr {
	t.Helper()
	n := int64(len(v)) * int64(unsafe.Sizeof(v[0]))
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyToDevice(p, unsafe.Pointer(&v[0]), n); err != nil {
		t.Fatal(err)
	}
	return p
}

func download[T any](t *testing.T, d *Device, p runtime.Ptr, n int) []T {
	t.Helper()
	v := make([]T, n)
	if err := d.CopyToHost(unsafe.Pointer(&v[0]), p, int64(n)*int64(unsafe.Sizeof(v[0]))); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMemoryRoundTrip(t *testing.T) {
	d := newDevice(t)
	// Larger than both staging buffers together, and not a multiple of a
	// chunk, so the double buffering and the tail are both exercised.
	n := 2*stageChunk + stageChunk/2 + 7
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i*7 + i>>13)
	}
	p := upload(t, d, src)
	if got := download[byte](t, d, p, n); string(got) != string(src) {
		t.Fatal("copy to device and back changed the data")
	}
	if err := d.Memset(p+100, 0xAB, 1000); err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), src...)
	for i := 100; i < 1100; i++ {
		want[i] = 0xAB
	}
	if got := download[byte](t, d, p, n); string(got) != string(want) {
		t.Fatal("memset: data differs")
	}
	q, err := d.Alloc(int64(n))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyDevice(q, p, int64(n)); err != nil {
		t.Fatal(err)
	}
	if got := download[byte](t, d, q, n); string(got) != string(want) {
		t.Fatal("device copy: data differs")
	}
	// Overlapping ranges behave as memmove.
	if err := d.CopyDevice(q+1, q, 4096); err != nil {
		t.Fatal(err)
	}
	moved := append([]byte(nil), want...)
	copy(moved[1:4097], want[:4096])
	if got := download[byte](t, d, q, 8192); string(got) != string(moved[:8192]) {
		t.Fatal("overlapping device copy is not a memmove")
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	for _, ptr := range []runtime.Ptr{p, q} {
		if err := d.Free(ptr); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Free(p); err == nil {
		t.Error("double free was not reported")
	}
}

// naiveGemm is the reference: row-major C = alpha*op(A)*op(B) + beta*C.
func naiveGemm(ta, tb bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				ai, bi := i*lda+p, p*ldb+j
				if ta {
					ai = p*lda + i
				}
				if tb {
					bi = j*ldb + p
				}
				s += a[ai] * b[bi]
			}
			c[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
		}
	}
}

func TestGemm(t *testing.T) {
	d := newDevice(t)
	r := rand.New(rand.NewPCG(3, 4))
	randVec := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = r.Float64()*2 - 1
		}
		return v
	}
	const m, n, k = 7, 5, 9
	for _, dt := range []runtime.DType{runtime.F32, runtime.F64} {
		for _, batch := range []int{1, 3} {
			for _, ta := range []bool{false, true} {
				for _, tb := range []bool{false, true} {
					name := fmt.Sprintf("%s/batch%d/ta=%v/tb=%v", dt, batch, ta, tb)
					// Padded leading dimensions check that LD is honoured.
					lda, ldb, ldc := k+2, n+1, n+3
					rowsA, rowsB := m, k
					if ta {
						lda, rowsA = m+1, k
					}
					if tb {
						ldb, rowsB = k+3, n
					}
					sa, sb, sc := rowsA*lda, rowsB*ldb, m*ldc
					a, b, c := randVec(batch*sa), randVec(sb), randVec(batch*sc)
					if dt == runtime.F32 {
						// Round inputs to f32 so the reference sees what the GPU sees.
						for _, v := range [][]float64{a, b, c} {
							for i := range v {
								v[i] = float64(float32(v[i]))
							}
						}
					}
					want := append([]float64(nil), c...)
					for i := range batch {
						// B is shared across the batch (stride 0).
						naiveGemm(ta, tb, m, n, k, 1.5, a[i*sa:], lda, b, ldb, -0.5, want[i*sc:], ldc)
					}
					up := func(v []float64) runtime.Ptr {
						if dt == runtime.F64 {
							return upload(t, d, v)
						}
						f := make([]float32, len(v))
						for i := range v {
							f[i] = float32(v[i])
						}
						return upload(t, d, f)
					}
					pa, pb, pc := up(a), up(b), up(c)
					err := d.Gemm(runtime.GemmArgs{DType: dt, TransA: runtime.Transpose(ta), TransB: runtime.Transpose(tb),
						M: m, N: n, K: k, Alpha: 1.5, Beta: -0.5, A: pa, LDA: lda, B: pb, LDB: ldb, C: pc, LDC: ldc,
						Batch: batch, StrideA: sa, StrideB: 0, StrideC: sc})
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					var got []float64
					if dt == runtime.F64 {
						got = download[float64](t, d, pc, len(c))
					} else {
						for _, v := range download[float32](t, d, pc, len(c)) {
							got = append(got, float64(v))
						}
					}
					// f32: k=9 products rounded to f32 and reassociated by
					// cuBLAS (TF32 is off by default): atol 1e-5.
					// f64: atol 1e-12.
					tol := 1e-12
					if dt == runtime.F32 {
						tol = 1e-5
					}
					for i := range got {
						if math.Abs(got[i]-want[i]) > tol {
							t.Fatalf("%s: C[%d] = %v, want %v", name, i, got[i], want[i])
						}
					}
					for _, p := range []runtime.Ptr{pa, pb, pc} {
						d.Free(p)
					}
				}
			}
		}
	}
	if err := d.Gemm(runtime.GemmArgs{DType: runtime.I32, M: 1, N: 1, K: 1}); err == nil {
		t.Error("i32 gemm was accepted")
	}
}

func TestLaunch(t *testing.T) {
	d := newDevice(t)
	l, err := d.Load(&runtime.Module{Name: "test", Source: testSource, Kernels: testKernels})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded from %s", l.(*loaded).From())
	axpy, fill := l.Function(0), l.Function(1)

	const n = 1000
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i), 1
	}
	px, py := upload(t, d, x), upload(t, d, y)
	grid, block := runtime.Dim3{X: (n + 127) / 128, Y: 1, Z: 1}, runtime.Dim3{X: 128, Y: 1, Z: 1}
	if err := d.Launch(axpy, grid, block, 0, float32(2), px, py, int32(n)); err != nil {
		t.Fatal(err)
	}
	for i, v := range download[float32](t, d, py, n) {
		if want := 1 + 2*float32(i); v != want { // exact: small integers
			t.Fatalf("y[%d] = %v, want %v", i, v, want)
		}
	}

	pz, err := d.Alloc(2 * n * 8)
	if err != nil {
		t.Fatal(err)
	}
	d.Memset(pz, 0, 2*n*8)
	if err := d.Launch(fill, grid, block, 0, 0.25, pz, int64(n), uint64(2)); err != nil {
		t.Fatal(err)
	}
	for i, v := range download[float64](t, d, pz, 2*n) {
		want := 0.0
		if i%2 == 0 {
			want = 0.25
		}
		if v != want {
			t.Fatalf("z[%d] = %v, want %v", i, v, want)
		}
	}

	// Arguments are checked against KernelInfo.Params.
	if err := d.Launch(axpy, grid, block, 0, 2.0, px, py, int32(n)); err == nil || !strings.Contains(err.Error(), "axpy_f32") {
		t.Errorf("float64 for a float parameter: %v", err)
	}
	if err := d.Launch(axpy, grid, block, 0, float32(2), px); err == nil {
		t.Error("too few arguments were accepted")
	}
	// A launch the driver rejects names the kernel.
	if err := d.Launch(axpy, grid, block, 1<<30, float32(2), px, py, int32(n)); err == nil || !strings.Contains(err.Error(), "axpy_f32") {
		t.Errorf("launch with 1 GiB of shared memory: %v", err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Load(&runtime.Module{Name: "missing", Source: testSource,
		Kernels: []runtime.KernelInfo{{Name: "no_such_kernel"}}}); err == nil || !strings.Contains(err.Error(), "no_such_kernel") {
		t.Errorf("load with a missing kernel: %v", err)
	}
}

func TestOutOfMemory(t *testing.T) {
	d := newDevice(t)
	huge := d.Info().TotalMem + 1<<30
	_, err := d.Alloc(huge)
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("Alloc(%d) = %v, want an *OutOfMemoryError", huge, err)
	}
	if oom.Requested != huge || oom.Free <= 0 || !strings.Contains(err.Error(), fmt.Sprint(huge)) {
		t.Errorf("OOM error lacks the sizes: %v", err)
	}
	// The device is still usable.
	p := upload(t, d, []float32{1, 2, 3})
	if got := download[float32](t, d, p, 3); got[2] != 3 {
		t.Errorf("after OOM: got %v", got)
	}
	if err := d.Sync(); err != nil {
		t.Errorf("after OOM: %v", err)
	}
}

func TestMemStats(t *testing.T) {
	d := newDevice(t)
	base := d.MemStats()
	p, err := d.Alloc(1000)
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.Alloc(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	s := d.MemStats()
	if s.Allocated-base.Allocated != 1000+3<<20 || s.Peak < s.Allocated || s.Reserved-base.Reserved != 1024+4<<20 {
		t.Errorf("after two allocs: %+v (base %+v)", s, base)
	}
	d.Free(q)
	s2 := d.MemStats()
	if s2.Allocated != s.Allocated-3<<20 || s2.Reserved != s.Reserved || s2.Peak != s.Peak {
		t.Errorf("after free: %+v, want Allocated down, Reserved (cached) and Peak unchanged (%+v)", s2, s)
	}
	// A request of the same size class reuses the cached block.
	q2, err := d.Alloc(3<<20 + 100)
	if err != nil {
		t.Fatal(err)
	}
	if q2 != q || d.MemStats().Reserved != s.Reserved {
		t.Errorf("same size class: got %#x (freed %#x), Reserved %d", q2, q, d.MemStats().Reserved)
	}
	d.Free(q2)
	d.Free(p)
	if err := d.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if s := d.MemStats(); s.Allocated != base.Allocated || s.Reserved != base.Reserved {
		t.Errorf("after EmptyCache: %+v, want %+v", s, base)
	}
}
