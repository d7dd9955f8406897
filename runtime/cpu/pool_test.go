package cpu

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

// mappings counts the process's memory mappings (vm.max_map_count is the
// limit on them).
func mappings(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// TestFiberPoolsSharedAcrossModules: the fiber stacks are the device's
// workers', lent to every module it runs (ngen_pool_head). A pool per
// module and OS thread, as before, mapped two regions (a stack and its
// guard page) per fiber for every module a worker ran: a process that
// ran the GPU forms of a few hundred modules (the fuzz runner)
// exhausted vm.max_map_count and dlopen failed. Here several modules run
// 1024-thread blocks on two workers; after the first, a module adds its
// library's few mappings, not 2×1024 per worker. Close unmaps the pools.
func TestFiberPoolsSharedAcrossModules(t *testing.T) {
	const modules, threads = 4, 1024
	var mods []*runtime.Module
	for i := range modules {
		src := fmt.Sprintf(`#include "ngen_emu.h"
__global__ void k(int *out) {
  __shared__ int s[%[2]d];
  s[threadIdx.x] = int(threadIdx.x) + %[1]d;
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}
NGEN_EMU_LAUNCHER int launch_0(const ngen_launch *l) { NGEN_RUN_SYNC(l, k(NGEN_ARG(l, int *, 0))); }
extern "C" int ngen_cpu_entry(int k, const ngen_launch *l) { return k == 0 ? launch_0(l) : -1; }
`, i, threads)
		m, err := CompileModule(fmt.Sprintf("pool%d", i), map[string]string{"entry.cc": src}, "entry.cc",
			[]runtime.KernelInfo{{Name: "k", Sync: true, Run: runtime.RunFibers, Params: []runtime.ArgKind{runtime.ArgPtr}}})
		if err != nil {
			t.Fatal(err)
		}
		mods = append(mods, m)
	}
	d, err := New(Options{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	out := upload(t, d, make([]int32, 2*threads))
	run := func(i int) {
		t.Helper()
		l, err := d.Load(mods[i])
		if err != nil {
			t.Fatal(err)
		}
		launch(t, d, l, 0, runtime.Dim3{X: 2, Y: 1, Z: 1}, runtime.Dim3{X: threads, Y: 1, Z: 1}, 0, out)
		got := download[int32](t, d, out, 2*threads)
		for j, v := range got {
			if want := int32(threads - 1 - j%threads + i); v != want {
				t.Fatalf("module %d: out[%d] = %d, want %d", i, j, v, want)
			}
		}
	}
	before := mappings(t)
	run(0)
	first := mappings(t)
	if grew := first - before; grew < threads {
		t.Logf("the first module's pools added only %d mappings", grew)
	}
	for i := 1; i < modules; i++ {
		run(i)
	}
	last := mappings(t)
	t.Logf("mappings: %d before, %d after the first module, %d after %d modules", before, first, last, modules)
	// A library is a handful of mappings; a worker's pool of 1024 fibers
	// is 2048.
	if per := (last - first) / (modules - 1); per > 100 {
		t.Errorf("each further module added %d mappings: its own fiber pools", per)
	}
	d.Close()
	if closed := mappings(t); first-closed < threads {
		t.Errorf("Close left the pools mapped: %d mappings after the first module, %d after Close", first, closed)
	}
}
