package cpu

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

// gpuFormsSource uses a warp shuffle directly, so it runs only with
// fibers, and writes one value per thread of the whole grid.
const gpuFormsSource = `
extern "C" __global__ void lane_sum(const float *x, float *y, long long n) {
  const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  float v = t < n ? x[t] : 0.0f;
  for (int o = 1; o < 32; o <<= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  if (t < n && threadIdx.x % 32 == 0) y[t / 32] = v;
}
`

func gpuFormsTestModule() *runtime.Module {
	return &runtime.Module{Name: "gpuforms_test", Source: gpuFormsSource, Kernels: []runtime.KernelInfo{
		{Name: "lane_sum", Sync: true, Params: []runtime.ArgKind{runtime.ArgPtr, runtime.ArgPtr, runtime.ArgI64}},
	}}
}

// TestGPUFormsLoadAndLimits: a GPUForms device compiles a module from its
// source alone (no CPUEntry), runs grid × block threads with __shfl_down_sync
// between the lanes of each warp, and refuses what a GPU would.
func TestGPUFormsLoadAndLimits(t *testing.T) {
	d, err := New(Options{Threads: 2, GPUForms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if !strings.Contains(d.Name(), "GPU forms") {
		t.Errorf("Name() = %q does not say GPU forms", d.Name())
	}
	if _, err := d.Load(&runtime.Module{Name: "nosrc", Kernels: gpuFormsTestModule().Kernels}); err == nil || !strings.Contains(err.Error(), "no CUDA source") {
		t.Errorf("load without a source: %v", err)
	}
	l, err := d.Load(gpuFormsTestModule())
	if err != nil {
		t.Fatal(err)
	}
	const n = 200 // 6 full warps and a partial one over 2 blocks of 128
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
	}
	px, py := upload(t, d, x), upload(t, d, make([]float32, (n+31)/32))
	launch(t, d, l, 0, runtime.Dim3{X: 2, Y: 1, Z: 1}, runtime.Dim3{X: 128, Y: 1, Z: 1}, 0, px, py, int64(n))
	y := download[float32](t, d, py, (n+31)/32)
	for w := range y {
		// Lane 0 reads only lanes 1 to 16 of its own warp, whose
		// values by then sum their own halves: exactly its warp's sum.
		want := float32(0)
		for i := w * 32; i < min(w*32+32, n); i++ {
			want += float32(i)
		}
		if y[w] != want {
			t.Errorf("warp %d: %v, want %v", w, y[w], want)
		}
	}
	f := l.Function(0)
	for _, tc := range []struct {
		grid   runtime.Dim3
		shared int
		want   string
	}{
		{runtime.Dim3{X: 1, Y: 65536, Z: 1}, 0, "at most 65535"},
		{runtime.Dim3{X: 1, Y: 1, Z: 70000}, 0, "at most 65535"},
		{runtime.Dim3{X: 1, Y: 1, Z: 1}, 48<<10 + 4, "without opting in"},
	} {
		err := d.Launch(f, tc.grid, runtime.Dim3{X: 32, Y: 1, Z: 1}, tc.shared, px, py, int64(n))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "lane_sum") {
			t.Errorf("grid %v shared %d: %v, want an error naming lane_sum that says %q", tc.grid, tc.shared, err, tc.want)
		}
	}
}

func TestGPUFormsEntryRejectsBadNames(t *testing.T) {
	if _, err := gpuFormsEntry("m.cu", []runtime.KernelInfo{{Name: "a;b"}}); err == nil {
		t.Error("kernel name a;b accepted")
	}
	if _, err := gpuFormsEntry("m.cu", []runtime.KernelInfo{{Name: "k", Params: []runtime.ArgKind{runtime.ArgKind(99)}}}); err == nil {
		t.Error("unknown parameter kind accepted")
	}
}
