package cpu

import (
	"os"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

// benchEntry runs add_relu_fwd three ways: through NGEN_RUN_SIMPLE, through
// NGEN_RUN_SYNC (fibers), and as the plain C loop over the same block range
// that is the peer both are measured against.
const benchEntry = `#include "ngen_emu.h"
#include "kernels.cu"
static int plain_loop(const ngen_launch *l) {
  const float *a = NGEN_ARG(l, const float *, 0), *b = NGEN_ARG(l, const float *, 1);
  float *y = NGEN_ARG(l, float *, 2);
  long long n = NGEN_ARG(l, int, 3), bs = l->block[0];
  long long end = l->block_end * bs < n ? l->block_end * bs : n;
  for (long long i = l->block_begin * bs; i < end; i++) y[i] = fmaxf(a[i] + b[i], 0.0f);
  return 0;
}
extern "C" int ngen_cpu_entry(int k, const ngen_launch *l) {
  switch (k) {
  case 0: NGEN_RUN_SIMPLE(l, add_relu_fwd(NGEN_ARG(l, const float *, 0), NGEN_ARG(l, const float *, 1), NGEN_ARG(l, float *, 2), NGEN_ARG(l, int, 3)));
  case 1: NGEN_RUN_SYNC(l, add_relu_fwd(NGEN_ARG(l, const float *, 0), NGEN_ARG(l, const float *, 1), NGEN_ARG(l, float *, 2), NGEN_ARG(l, int, 3)));
  case 2: return plain_loop(l);
  }
  return -1;
}
`

// BenchmarkElementwise reports ns per element of a one-thread-per-element
// kernel over 3M floats, block 256, for each way of running it.
func BenchmarkElementwise(b *testing.B) {
	src, err := os.ReadFile("testdata/kernels.cu")
	if err != nil {
		b.Fatal(err)
	}
	params := []runtime.ArgKind{runtime.ArgPtr, runtime.ArgPtr, runtime.ArgPtr, runtime.ArgI32}
	m, err := CompileModule("bench", map[string]string{"kernels.cu": string(src), "entry.cc": benchEntry}, "entry.cc",
		[]runtime.KernelInfo{{Name: "add_relu_simple", Params: params}, {Name: "add_relu_sync", Sync: true, Params: params},
			{Name: "plain_c_loop", Params: params}})
	if err != nil {
		b.Fatal(err)
	}
	d, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	l, err := d.Load(m)
	if err != nil {
		b.Fatal(err)
	}
	const n = 3_000_000
	pa, pb, py := upload(b, d, make([]float32, n)), upload(b, d, make([]float32, n)), upload(b, d, make([]float32, n))
	for k, name := range []string{"simple", "sync", "plain_c"} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := d.Launch(l.Function(k), runtime.Dim3{X: (n + 255) / 256, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}, 0,
					pa, pb, py, int32(n)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
			b.ReportMetric(0, "ns/op") // per-launch time is in ns/elem
		})
	}
}

// BenchmarkLaunchOverhead is a one-block launch and a launch split over the
// workers, each doing almost no work.
func BenchmarkLaunchOverhead(b *testing.B) {
	d, l := newTestDevice(b)
	pa := upload(b, d, make([]float32, 512))
	for _, blocks := range []int{1, 2} {
		b.Run(map[int]string{1: "inline", 2: "workers"}[blocks], func(b *testing.B) {
			for b.Loop() {
				if err := d.Launch(l.Function(kAddRelu), runtime.Dim3{X: blocks, Y: 1, Z: 1}, runtime.Dim3{X: 32, Y: 1, Z: 1}, 0,
					pa, pa, pa, int32(64)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
