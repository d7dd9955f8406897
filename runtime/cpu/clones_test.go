package cpu

import (
	"debug/elf"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu/emu"
)

// cloneKernels are an Adam-like update (sqrt and divide, which the AVX2
// copy runs 8 lanes wide) and a dropout draw (the 8-lane simd variant of
// ngen_dropout_f), written as generated kernels are.
const cloneKernels = `
__global__ void adamish(float *p, float *m, float *v, const float *g, float lr, int n) {
  NGEN_GRID_STRIDE(i, n) {
    const float mi = 0.9f * m[i] + 0.1f * g[i], vi = 0.999f * v[i] + 0.001f * g[i] * g[i];
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr * mi / (ngen_sqrtf(vi) + 1e-8f);
  }
}
__global__ void dropped(float *y, const float *x, int n, unsigned long long seed, unsigned long long step) {
  NGEN_GRID_STRIDE(i, n) { y[i] = x[i] * ngen_dropout(seed, step, 7u, i, 0.8f, 1.25f); }
}
`

var cloneInfos = []runtime.KernelInfo{
	{Name: "adamish", GridStride: true, Params: []runtime.ArgKind{runtime.ArgPtr, runtime.ArgPtr, runtime.ArgPtr, runtime.ArgPtr, runtime.ArgF32, runtime.ArgI32}},
	{Name: "dropped", GridStride: true, Params: []runtime.ArgKind{runtime.ArgPtr, runtime.ArgPtr, runtime.ArgI32, runtime.ArgU64, runtime.ArgU64}},
}

// cloneEntry has a launcher per kernel, as codegen.HostGlue writes them
// (extern "C" here, so that the test finds their symbols by name).
const cloneEntry = `#include "ngen_emu.h"
#include "k.cu"
extern "C" NGEN_EMU_LAUNCHER int launch_adamish(const ngen_launch *l) {
  NGEN_RUN_SPAN(l, adamish(NGEN_ARG(l, float *, 0), NGEN_ARG(l, float *, 1), NGEN_ARG(l, float *, 2), NGEN_ARG(l, float *, 3), NGEN_ARG(l, float, 4), NGEN_ARG(l, int, 5)));
}
extern "C" NGEN_EMU_LAUNCHER int launch_dropped(const ngen_launch *l) {
  NGEN_RUN_SPAN(l, dropped(NGEN_ARG(l, float *, 0), NGEN_ARG(l, float *, 1), NGEN_ARG(l, int, 2), NGEN_ARG(l, unsigned long long, 3), NGEN_ARG(l, unsigned long long, 4)));
}
extern "C" int ngen_cpu_entry(int k, const ngen_launch *l) {
  switch (k) {
  case 0: return launch_adamish(l);
  case 1: return launch_dropped(l);
  }
  return -1;
}
`

// runCloneKernels runs both kernels with the given entry source and
// returns p, m, v and y.
func runCloneKernels(t *testing.T, name, entry string) [4][]float32 {
	m, err := CompileModule(name, map[string]string{"k.cu": cloneKernels, "entry.cc": entry}, "entry.cc", cloneInfos)
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l, err := d.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4099 // not a multiple of 8: the loops' remainders run too
	p, mo, v, g, x := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
	for i := range p {
		p[i] = float32(math.Sin(float64(i)))
		mo[i] = float32(math.Cos(float64(i))) * 1e-2
		v[i] = float32(i%13) * 1e-5
		g[i] = float32(math.Sin(float64(3*i+1))) * 1e-2
		x[i] = float32(i%17) - 8
	}
	pp, pm, pv, pg := upload(t, d, p), upload(t, d, mo), upload(t, d, v), upload(t, d, g)
	px, py := upload(t, d, x), upload(t, d, make([]float32, n))
	grid, block := runtime.Dim3{X: 4, Y: 1, Z: 1}, runtime.Dim3{X: 256, Y: 1, Z: 1}
	for s := 0; s < 3; s++ {
		launch(t, d, l, 0, grid, block, 0, pp, pm, pv, pg, float32(1e-3), int32(n))
	}
	launch(t, d, l, 1, grid, block, 0, py, px, int32(n), uint64(0x1234_5678_9abc_def0), uint64(5))
	return [4][]float32{download[float32](t, d, pp, n), download[float32](t, d, pm, n), download[float32](t, d, pv, n), download[float32](t, d, py, n)}
}

// TestEntryCloneBitIdentical runs kernels through NGEN_EMU_LAUNCHER's AVX2
// copy (on a host with AVX2) and through the SSE2 build alone
// (NGEN_EMU_NO_CLONES): results, dropout masks included, must be equal bit
// for bit, which fails if the copy contracts a*b+c into FMAs or its 8-lane
// dropout variant draws other masks.
func TestEntryCloneBitIdentical(t *testing.T) {
	if info, _ := os.ReadFile("/proc/cpuinfo"); !strings.Contains(string(info), " avx2") {
		t.Skip("no AVX2 on this host: both builds run the SSE2 copy")
	}
	got := runCloneKernels(t, "clones", cloneEntry)
	want := runCloneKernels(t, "noclones", "#define NGEN_EMU_NO_CLONES 1\n"+cloneEntry)
	kept := 0
	for a, name := range []string{"p", "m", "v", "y"} {
		for i := range got[a] {
			if math.Float32bits(got[a][i]) != math.Float32bits(want[a][i]) {
				t.Fatalf("%s[%d] = %g with the AVX2 copy, %g without", name, i, got[a][i], want[a][i])
			}
		}
	}
	for _, y := range got[3] {
		if y != 0 {
			kept++
		}
	}
	if kept < 3000 || kept > 3600 { // about 0.8 of 4099, less the x == 0 elements
		t.Errorf("dropout kept %d of 4099 elements, want about 0.8 of the non-zero ones", kept)
	}
}

// TestEntryHasAVX2Clone checks that a launcher marked NGEN_EMU_LAUNCHER
// is an ifunc with an AVX2 copy whose Adam loop uses 256-bit divides, that
// the 8-lane dropout variant is there to call, and that
// -DNGEN_EMU_NO_CLONES leaves one plain function.
func TestEntryHasAVX2Clone(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"ngen_emu.h": emu.Header, "k.cu": cloneKernels, "entry.cc": cloneEntry} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	syms := func(extra ...string) map[string]elf.Symbol {
		args := append([]string{"-std=c++17", "-O3", "-Wall", "-Wextra", "-fPIC", "-c", "entry.cc", "-o", "entry.o"}, extra...)
		cmd := exec.Command("g++", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
			t.Fatalf("g++ %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		f, err := elf.Open(filepath.Join(dir, "entry.o"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ss, err := f.Symbols()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]elf.Symbol{}
		for _, s := range ss {
			m[s.Name] = s
		}
		return m
	}
	s := syms()
	for _, l := range []string{"launch_adamish", "launch_dropped"} {
		if e, ok := s[l]; !ok || elf.ST_TYPE(e.Info) != elf.STT_GNU_IFUNC {
			t.Errorf("%s is not an ifunc: %+v", l, e)
		}
		if _, ok := s[l+".avx2"]; !ok {
			t.Errorf("no AVX2 copy %s.avx2", l)
		}
	}
	if _, ok := s["_ZGVdN8vvvvvvvv_ngen_dropout_f"]; !ok {
		t.Error("the 8-lane dropout variant is not defined")
	}
	cmd := exec.Command("objdump", "-d", "--no-show-raw-insn", filepath.Join(dir, "entry.o"))
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("objdump: %v", err)
	}
	inClone, ymmDiv, fma := false, false, false
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasSuffix(line, ">:") {
			inClone = strings.Contains(line, "<launch_adamish.avx2>")
		}
		if inClone && strings.Contains(line, "vdivps") && strings.Contains(line, "%ymm") {
			ymmDiv = true
		}
		if strings.Contains(line, "vfmadd") || strings.Contains(line, "vfnmadd") || strings.Contains(line, "vfmsub") {
			fma = true
		}
	}
	if !ymmDiv {
		t.Error("the AVX2 copy has no 256-bit divide: its loops did not vectorise 8 wide")
	}
	if fma {
		t.Error("the object uses FMA: results would differ from the SSE2 copy")
	}
	if e, ok := syms("-DNGEN_EMU_NO_CLONES")["launch_adamish"]; !ok || elf.ST_TYPE(e.Info) != elf.STT_FUNC {
		t.Errorf("with NGEN_EMU_NO_CLONES, launch_adamish is not a plain function: %+v", e)
	}
}

// elementwiseKernels are the gpt model's GELU and dropout kernels as
// generated (models/transformer: linear1_bias_gelu_dropout_fwd and its
// backward), and the f16 MLP's add_relu_dropout_fwd, one loop each.
const elementwiseKernels = `#include "ngen_emu.h"
__global__ void gelu_dropout_fwd(const float *x, const float *b, float *pre, float *y, int n, unsigned long long seed, unsigned long long step) {
  NGEN_GRID_STRIDE_ROWS(r, j, n / 1024, 1024) {
    const long long i = r * 1024LL + j;
    const float v = x[i] + b[j];
    pre[i] = v;
    y[i] = ngen_gelu(v) * ngen_dropout(seed, step, 4u, i, 0.9f, 1.1111111111111112f);
  }
}
__global__ void dropout_gelu_bwd(const float *dy, const float *pre, float *dx, int n, unsigned long long seed, unsigned long long step) {
  NGEN_GRID_STRIDE(i, n) { dx[i] = dy[i] * ngen_dropout(seed, step, 4u, i, 0.9f, 1.1111111111111112f) * ngen_gelu_grad(pre[i]); }
}
__global__ void f16_add_relu_dropout_fwd(const __half *x, const __half *b, __half *pre, __half *y, int n, unsigned long long seed, unsigned long long step) {
  NGEN_GRID_STRIDE_ROWS(r, j, n / 512, 512) {
    const long long i = r * 512LL + j;
    float a = x[i];
    float c = b[j];
    float v = __half2float(__float2half_rn(a + c));
    float w = ngen_relu(v);
    pre[i] = w;
    y[i] = __half2float(__float2half_rn(w * ngen_dropout(seed, step, 4u, i, 0.8f, 1.25f)));
  }
}
__global__ void bf16_maxpool_bwd(const __nv_bfloat16 *__restrict__ in0, const int *__restrict__ in1, __nv_bfloat16 *__restrict__ out0, int B) {
  NGEN_GRID_STRIDE_ROWS(r, j, 896LL * (long long)B, 28) {
    const long long i = r * 28LL + j;
    const long long n = (long long)((unsigned long long)(r) / 896u);
    unsigned n_t = (unsigned)((unsigned long long)(r) - (unsigned long long)n * 896u);
    const int y = (int)(n_t % 28u); n_t /= 28u;
    const long long o = (n * 32 + (int)n_t) * 196 + (int)((unsigned)y / 2u) * 14 + (int)((unsigned)j / 2u);
    const __nv_bfloat16 g = ngen_ld16(in0, o);
    const __nv_bfloat16 v = in1[o] == (int)((unsigned)y % 2u) * 2 + (int)((unsigned)j % 2u) ? g : __float2bfloat16_rn(0.0f);
    out0[i] = v;
  }
}
extern "C" NGEN_EMU_LAUNCHER void entry(int k, float **p, int n, unsigned long long seed, unsigned long long step) {
  ngen_emu::span_blocks = 1; /* as run_span sets them: unset, g++ proves the loops dead */
  ngen_emu::span_first = 0;
  ngen_emu::span_last = 1;
  if (k == 0) gelu_dropout_fwd(p[0], p[1], p[2], p[3], n, seed, step);
  else if (k == 1) dropout_gelu_bwd(p[0], p[1], p[2], n, seed, step);
  else if (k == 2) f16_add_relu_dropout_fwd((const __half *)p[0], (const __half *)p[1], (__half *)p[2], (__half *)p[3], n, seed, step);
  else bf16_maxpool_bwd((const __nv_bfloat16 *)p[0], (const int *)p[1], (__nv_bfloat16 *)p[2], n / 25088);
}
`

// TestElementwiseLoopsVectorise guards the CPU speed of GELU, dropout,
// 16-bit ReLU and 16-bit gathers: g++ must vectorise the kernels' loops. A
// ?: in fast_erff once left the GELU loops scalar (about 9 ns an element
// instead of under 2), relu's ?: the f16 MLP's add_relu_dropout_fwd (37
// ns an element instead of 5), and a bf16 pooling backward's 16-bit load
// at a computed index (g[o], not ngen_ld16's 32-bit word: no 16-bit
// gather exists) stayed scalar at 3× the time, with every result still
// right.
func TestElementwiseLoopsVectorise(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"ngen_emu.h": emu.Header, "k.cc": elementwiseKernels} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"-std=c++17", "-O3", "-fPIC", "-fopt-info-vec-optimized", "-c", "k.cc", "-o", "k.o"}
	cmd := exec.Command("g++", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("g++ %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	for _, line := range []string{"k.cc:3:", "k.cc:11:", "k.cc:14:", "k.cc:25:"} { // the kernels' loops
		found := 0 // once in each copy of the entry (NGEN_EMU_LAUNCHER)
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, line) && strings.Contains(l, "loop vectorized") {
				found++
			}
		}
		if found < 2 {
			t.Errorf("the loop at %s was vectorised in %d of the entry's 2 copies; g++ -fopt-info-vec-optimized said:\n%s", line, found, out)
		}
	}
}
