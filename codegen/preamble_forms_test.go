package codegen

import (
	"testing"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// The preamble's loop and reduction forms, run as the GPU runs them
// (cpu.Options.GPUForms) and in the emulation's CPU forms, against exact
// answers. Planted bugs these tests catch (each planted by hand in
// preamble.cuh, seen to fail, reverted):
//   - an off-by-one in the GPU grid-stride bound (`i < (n)` as
//     `i <= (n)`, the ROWS form's `< (rows) * (w)` as `<=`):
//     TestPreambleGridStride, GPU forms (it also fails the generated
//     packages in runtime/cpu's TestGPUFormsGeneratedPackages);
//   - a wrong GPU warp butterfly (ngen_warp_sum or ngen_warp_max starting
//     at o = 8, or stepping o -= 2 or o >>= 2): TestPreambleWarpButterfly,
//     GPU forms.

const formsKernels = `
extern "C" __global__ void stride_hits(int *hits, long long n) {
  NGEN_GRID_STRIDE(i, n) atomicAdd(&hits[i], 1);
}
extern "C" __global__ void rows_hits(int *hits, int *rj, long long rows, int w) {
  NGEN_GRID_STRIDE_ROWS(r, j, rows, w) {
    atomicAdd(&hits[r * w + j], 1);
    rj[r * w + j] = (int)r * 1000 + j;
  }
}
extern "C" __global__ void warp_reduce(unsigned *sum, float *mx) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
  sum[t] = ngen_warp_sum(1u << lane);
  mx[t] = ngen_warp_max((float)((lane * 7 + blockIdx.x) % 32));
}
`

var formsInfos = []runtime.KernelInfo{
	{Name: "stride_hits", GridStride: true, Params: []runtime.ArgKind{runtime.ArgPtr, runtime.ArgI64}},
	{Name: "rows_hits", GridStride: true, Params: []runtime.ArgKind{runtime.ArgPtr, runtime.ArgPtr, runtime.ArgI64, runtime.ArgI32}},
	{Name: "warp_reduce", Sync: true, Params: []runtime.ArgKind{runtime.ArgPtr, runtime.ArgPtr}},
}

// formsDevices loads the kernels on a device with the GPU forms and on one
// with the CPU forms (compiled through the same glue a package uses).
func formsDevices(t *testing.T) map[string]struct {
	dev *cpu.Device
	mod runtime.Loaded
} {
	src := preamble + formsKernels
	cpuMod := cpuFormsModule(t, src)
	out := map[string]struct {
		dev *cpu.Device
		mod runtime.Loaded
	}{}
	for name, gpuForms := range map[string]bool{"gpu forms": true, "cpu forms": false} {
		d, err := cpu.New(cpu.Options{Threads: 2, GPUForms: gpuForms})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		l, err := d.Load(cpuMod)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = struct {
			dev *cpu.Device
			mod runtime.Loaded
		}{d, l}
	}
	return out
}

// cpuFormsModule compiles src for the default CPU forms, with an entry as
// CPUGlue writes one; its Source lets a GPUForms device recompile it.
func cpuFormsModule(t *testing.T, src string) *runtime.Module {
	t.Helper()
	entry := "#define NGEN_EMU 1\n#include \"ngen_emu.h\"\n#include \"forms.cu\"\n" +
		"extern \"C\" int ngen_cpu_entry(int k, const ngen_launch *l) {\n  switch (k) {\n" +
		"  case 0: NGEN_RUN_SPAN(l, stride_hits(NGEN_ARG(l, int *, 0), NGEN_ARG(l, long long, 1)));\n" +
		"  case 1: NGEN_RUN_SPAN(l, rows_hits(NGEN_ARG(l, int *, 0), NGEN_ARG(l, int *, 1), NGEN_ARG(l, long long, 2), NGEN_ARG(l, int, 3)));\n" +
		"  case 2: NGEN_RUN_SYNC(l, warp_reduce(NGEN_ARG(l, unsigned *, 0), NGEN_ARG(l, float *, 1)));\n" +
		"  }\n  return -1;\n}\n"
	m, err := cpu.CompileModule("forms", map[string]string{"forms.cu": src, "entry.cc": entry}, "entry.cc", formsInfos)
	if err != nil {
		t.Fatal(err)
	}
	m.Source = src
	return m
}

func devBuf[T any](t *testing.T, d *cpu.Device, n int) runtime.Ptr {
	t.Helper()
	bytes := int64(n) * int64(unsafe.Sizeof(*new(T)))
	p, err := d.Alloc(bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Memset(p, 0, bytes); err != nil {
		t.Fatal(err)
	}
	return p
}

func hostCopy[T any](t *testing.T, d *cpu.Device, p runtime.Ptr, n int) []T {
	t.Helper()
	xs := make([]T, n)
	if err := d.CopyToHost(unsafe.Pointer(unsafe.SliceData(xs)), p, int64(n)*int64(unsafe.Sizeof(*new(T)))); err != nil {
		t.Fatal(err)
	}
	return xs
}

// TestPreambleGridStride: every index in [0, n) is visited exactly once,
// and nothing past n, whether the grid covers n, falls short (threads
// stride more than once) or overshoots it.
func TestPreambleGridStride(t *testing.T) {
	for name, dm := range formsDevices(t) {
		d := dm.dev
		for _, tc := range []struct{ n, grid, block int }{{1000, 4, 256}, {1024, 4, 256}, {5, 3, 64}, {4099, 2, 128}, {70, 1, 32}} {
			hits := devBuf[int32](t, d, tc.n+1)
			if err := d.Launch(dm.mod.Function(0), runtime.Dim3{X: tc.grid, Y: 1, Z: 1}, runtime.Dim3{X: tc.block, Y: 1, Z: 1}, 0, hits, int64(tc.n)); err != nil {
				t.Fatal(err)
			}
			h := hostCopy[int32](t, d, hits, tc.n+1)
			for i, v := range h {
				want := int32(0)
				if i < tc.n {
					want = 1
				}
				if v != want {
					t.Fatalf("%s: NGEN_GRID_STRIDE n=%d grid %d×%d: index %d visited %d times, want %d", name, tc.n, tc.grid, tc.block, i, v, want)
				}
			}
			d.Free(hits)
		}
		for _, tc := range []struct{ rows, w, grid, block int }{{37, 13, 2, 64}, {8, 256, 4, 256}, {3, 1, 1, 32}, {100, 7, 1, 128}} {
			n := tc.rows * tc.w
			hits, rj := devBuf[int32](t, d, n+1), devBuf[int32](t, d, n+1)
			if err := d.Launch(dm.mod.Function(1), runtime.Dim3{X: tc.grid, Y: 1, Z: 1}, runtime.Dim3{X: tc.block, Y: 1, Z: 1}, 0, hits, rj, int64(tc.rows), int32(tc.w)); err != nil {
				t.Fatal(err)
			}
			h, at := hostCopy[int32](t, d, hits, n+1), hostCopy[int32](t, d, rj, n+1)
			for i := range n + 1 {
				want, wantRJ := int32(1), int32(i/tc.w*1000+i%tc.w)
				if i == n {
					want, wantRJ = 0, 0
				}
				if h[i] != want || at[i] != wantRJ {
					t.Fatalf("%s: NGEN_GRID_STRIDE_ROWS %d×%d grid %d×%d: element %d visited %d times as (r, j) code %d, want %d as %d",
						name, tc.rows, tc.w, tc.grid, tc.block, i, h[i], at[i], want, wantRJ)
				}
			}
			d.Free(hits)
			d.Free(rj)
		}
	}
}

// TestPreambleWarpButterfly: every lane of every warp ends with the sum of
// the 32 lanes' distinct bits (all 32 bits set) and their maximum (31),
// exactly, at block sizes of one warp and several.
func TestPreambleWarpButterfly(t *testing.T) {
	for name, dm := range formsDevices(t) {
		d := dm.dev
		for _, tc := range []struct{ grid, block int }{{1, 32}, {3, 64}, {2, 256}} {
			n := tc.grid * tc.block
			sum, mx := devBuf[uint32](t, d, n), devBuf[float32](t, d, n)
			if err := d.Launch(dm.mod.Function(2), runtime.Dim3{X: tc.grid, Y: 1, Z: 1}, runtime.Dim3{X: tc.block, Y: 1, Z: 1}, 0, sum, mx); err != nil {
				t.Fatal(err)
			}
			s, m := hostCopy[uint32](t, d, sum, n), hostCopy[float32](t, d, mx, n)
			for i := range n {
				if s[i] != 0xffffffff || m[i] != 31 {
					t.Fatalf("%s: grid %d×%d: thread %d has warp sum %#x and max %v, want 0xffffffff and 31",
						name, tc.grid, tc.block, i, s[i], m[i])
				}
			}
			d.Free(sum)
			d.Free(mx)
		}
	}
}
