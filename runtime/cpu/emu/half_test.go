package emu

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The emulation and CUDA's headers both define __half, so each lives in
// its own translation unit behind a plain C function.
const halfEmuTU = `#include "ngen_half.h"
extern "C" unsigned short emu_f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }
extern "C" unsigned short emu_f2bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
// A store converts through the type's constructor.
extern "C" unsigned short emu_f2bf_store(float f) { return __bfloat16_as_ushort(__nv_bfloat16(f)); }
extern "C" float emu_h2f(unsigned short u) { return __half2float(__ushort_as_half(u)); }
extern "C" float emu_bf2f(unsigned short u) { return __bfloat162float(__ushort_as_bfloat16(u)); }
extern "C" unsigned short emu_hop(int op, unsigned short a, unsigned short b) {
  __half x = __ushort_as_half(a), y = __ushort_as_half(b);
  switch (op) { case 0: return __half_as_ushort(x + y); case 1: return __half_as_ushort(x - y);
  case 2: return __half_as_ushort(x * y); default: return __half_as_ushort(x / y); }
}
`

const halfCudaTU = `#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <string.h>
// (CUDA 11.8 has __half_as_ushort and the like on the device only.)
template <class T> static unsigned short bits(T h) { unsigned short u; memcpy(&u, &h, 2); return u; }
extern "C" unsigned short cuda_f2h(float f) { return bits(__float2half_rn(f)); }
extern "C" unsigned short cuda_f2bf(float f) { return bits(__float2bfloat16_rn(f)); }
extern "C" float cuda_h2f(unsigned short u) { __half_raw r; r.x = u; return __half2float(__half(r)); }
extern "C" float cuda_bf2f(unsigned short u) { __nv_bfloat16_raw r; r.x = u; return __bfloat162float(__nv_bfloat16(r)); }
`

// The driver walks every float whose bit pattern is a multiple of the
// stride (1: all 2^32), and every 16-bit pattern back; then + - * / of
// pairs of halves against the correctly rounded result, found in double.
const halfMainTU = `#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
extern "C" {
unsigned short emu_f2h(float), emu_f2bf(float), emu_f2bf_store(float), cuda_f2h(float), cuda_f2bf(float);
float emu_h2f(unsigned short), emu_bf2f(unsigned short), cuda_h2f(unsigned short), cuda_bf2f(unsigned short);
unsigned short emu_hop(int, unsigned short, unsigned short);
}

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float ffrom(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static bool isnanbits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
// nearest rounds v to a half on its own terms: of the patterns next to a
// first guess, the one nearest v, ties to an even pattern. For + - * of
// two halves v is exact in double; for / it is within 2^-53 of the exact
// quotient, which cannot move it across a midpoint that it does not equal.
static unsigned short nearest(double v) {
  if (v != v) return 0x7fff;
  unsigned short sign = __builtin_signbit(v) ? 0x8000 : 0;
  double a = __builtin_fabs(v);
  if (a >= 65520.0) return sign | 0x7c00;
  int m0 = cuda_f2h((float)a) & 0x7fff, best = -1;
  double bd = 0;
  for (int m = m0 - 1; m <= m0 + 1; m++) {
    if (m < 0 || m > 0x7bff) continue;
    double d = __builtin_fabs((double)cuda_h2f(m) - a);
    if (best < 0 || d < bd || (d == bd && (m & 1) == 0)) best = m, bd = d;
  }
  return sign | best;
}
int main(int argc, char **argv) {
  uint64_t stride = strtoull(argv[1], 0, 10), bad = 0, n = 0;
  for (uint64_t i = 0; i < (1ull << 32); i += stride, n++) {
    float f = ffrom((uint32_t)i);
    unsigned short a = emu_f2h(f), b = cuda_f2h(f), c = emu_f2bf(f), d = cuda_f2bf(f), e = emu_f2bf_store(f);
    if (a != b || c != d || e != d) {
      if (bad++ < 10) printf("float %08llx: half emu %04x cuda %04x, bfloat16 emu %04x (store %04x) cuda %04x\n", (unsigned long long)i, a, b, c, e, d);
    }
  }
  for (uint32_t h = 0; h < 65536; h++) {
    uint32_t a = fbits(emu_h2f(h)), b = fbits(cuda_h2f(h)), c = fbits(emu_bf2f(h)), d = fbits(cuda_bf2f(h));
    bool ok = (isnanbits(b) ? isnanbits(a) : a == b) && (isnanbits(d) ? isnanbits(c) : c == d);
    if (!ok && bad++ < 20) printf("bits %04x: half->float emu %08x cuda %08x, bfloat16->float emu %08x cuda %08x\n", h, a, b, c, d);
  }
  uint64_t ops = 0;
  for (uint32_t h = 0; h < 65536; h += 7) {
    for (uint32_t g = 0; g < 65536; g += 251) {
      double x = cuda_h2f(h), y = cuda_h2f(g);
      double want[4] = {x + y, x - y, x * y, x / y};
      for (int op = 0; op < 4; op++, ops++) {
        unsigned short got = emu_hop(op, h, g), w = nearest(want[op]);
        bool nan = (w & 0x7fff) > 0x7c00;
        if (nan ? (got & 0x7fff) <= 0x7c00 : got != w) {
          if (bad++ < 30) printf("op %d on %04x, %04x: emu %04x want %04x\n", op, h, g, got, w);
        }
      }
    }
  }
  printf("checked %llu floats, 65536 patterns back, %llu operations: %llu mismatches\n", (unsigned long long)n, (unsigned long long)ops, (unsigned long long)bad);
  return bad != 0;
}
`

var halfAll = flag.Bool("half-exhaustive", false, "TestHalfConversions: every one of the 2^32 floats (about 50 s of CPU)")

// TestHalfConversions holds ngen_half.h's host types to CUDA's own
// cuda_fp16.h and cuda_bf16.h (whose host functions are the device's
// conversions): float to half and to bfloat16 on every 13th float bit
// pattern (every 61st with -short, all 2^32 with -half-exhaustive), both back to float on every 16-bit pattern
// (NaN to some NaN: CUDA's host and device widenings differ in payload),
// and half + - * / correctly rounded.
func TestHalfConversions(t *testing.T) {
	cuda := "/usr/include/cuda_fp16.h"
	if _, err := os.Stat(cuda); err != nil {
		t.Skipf("%s: %v (the CUDA toolkit's headers are the reference; scripts/setup.sh installs them)", cuda, err)
	}
	dir := t.TempDir()
	files := map[string]string{"ngen_half.h": HalfHeader, "emu.cc": halfEmuTU, "cuda.cc": halfCudaTU, "main.cc": halfMainTU}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "half")
	build := exec.Command("g++", "-std=c++17", "-O2", "-I", dir, "-o", bin,
		filepath.Join(dir, "emu.cc"), filepath.Join(dir, "cuda.cc"), filepath.Join(dir, "main.cc"))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	stride := "13"
	switch {
	case *halfAll:
		stride = "1"
	case testing.Short():
		stride = "61"
	}
	out, err := exec.Command(bin, stride).CombinedOutput()
	t.Logf("%s", strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("the emulated half types differ from CUDA's: %v", err)
	}
}

// TestHalfHeaderUnderNvcc compiles a kernel that includes ngen_half.h
// with nvcc, which takes CUDA's own headers.
func TestHalfHeaderUnderNvcc(t *testing.T) {
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		t.Skip("nvcc not installed (scripts/setup.sh installs it)")
	}
	dir := t.TempDir()
	kernel := `#include "ngen_half.h"
extern "C" __global__ void widen(float *out, const __half *h, const __nv_bfloat16 *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = __half2float(h[i]) + __bfloat162float(b[i]);
}
`
	if err := os.WriteFile(filepath.Join(dir, "ngen_half.h"), []byte(HalfHeader), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "k.cu"), []byte(kernel), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nvcc, "-arch=sm_80", "-ptx", "-I", dir, "-o", filepath.Join(dir, "k.ptx"), filepath.Join(dir, "k.cu"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nvcc: %v\n%s", err, out)
	}
}
