// What a 16-bit attention needs. First, an f32 kept in a 16-bit buffer
// (attention's log-sum-exp under mixed precision, which backward needs to
// f32 precision): its bits in two
// elements, the high half first. Only programs with a 16-bit attention
// include this (after preamble_half.cuh). The elements are written and
// read as the unsigned short each type holds (both are standard-layout
// wrappers of one): CUDA 11.8 declares __ushort_as_bfloat16 and
// __bfloat16_as_ushort only for sm_80 and up, and the backend also loads
// modules on older GPUs through NVRTC.
__device__ __forceinline__ void ngen_store_f32_bits(unsigned short *q, float x) {
  const unsigned u = __float_as_uint(x);
  q[0] = (unsigned short)(u >> 16);
  q[1] = (unsigned short)(u & 0xffffu);
}
__device__ __forceinline__ float ngen_load_f32_bits(const unsigned short *q) {
  return __uint_as_float((unsigned)q[0] << 16 | (unsigned)q[1]);
}
__device__ __forceinline__ void ngen_store_f32_bits(__nv_bfloat16 *p, float x) { ngen_store_f32_bits(reinterpret_cast<unsigned short *>(p), x); }
__device__ __forceinline__ void ngen_store_f32_bits(__half *p, float x) { ngen_store_f32_bits(reinterpret_cast<unsigned short *>(p), x); }
__device__ __forceinline__ float ngen_load_f32_bits(const __nv_bfloat16 *p) { return ngen_load_f32_bits(reinterpret_cast<const unsigned short *>(p)); }
__device__ __forceinline__ float ngen_load_f32_bits(const __half *p) { return ngen_load_f32_bits(reinterpret_cast<const unsigned short *>(p)); }
// Attention's tensor-core form (compiler/ops/attention_mma.go) multiplies
// 16-bit tiles with nvcuda::wmma, which bf16 has from sm_80: a module
// compiled for an older GPU (NVRTC) takes the CUDA-core form beside it.
// The CPU emulation defines nvcuda::wmma itself (ngen_half.h) and runs
// the form where it runs the GPU forms as written (cpu.Options.GPUForms);
// the host glue every CPU run links, whose attention is the host's GEMM
// form, keeps the CUDA-core form instead (the tensor-core one made the
// host build of a bf16 TransformerLM 10–40% slower to compile).
#ifndef NGEN_EMU
#include <mma.h>
#endif
#if defined(__CUDA_ARCH__) ? __CUDA_ARCH__ >= 800 : defined(NGEN_EMU_GPU_FORMS)
#define NGEN_WMMA16 1
#endif
// Its tiles are staged 16 bytes (8 elements) a thread at a time where the
// addresses are 16-byte aligned: the 16 bytes at s where ok, else zeros.
__device__ __forceinline__ void ngen_copy16_if(void *d, const void *s, bool ok) {
#ifdef NGEN_EMU
  if (ok)
    memcpy(d, s, 16);
  else
    memset(d, 0, 16);
#else
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (ok)
    v = *reinterpret_cast<const uint4 *>(s);
  *reinterpret_cast<uint4 *>(d) = v;
#endif
}
