
// 16-bit float types (mixed precision, docs/AMP.md): a kernel stores
// __nv_bfloat16 or __half and computes in float, rounding each 16-bit
// value where it is computed (ngen_round_bf16), so that a fused kernel
// computes what one kernel per op does. The CPU emulation header defines
// the types bit for bit (runtime/cpu/emu/ngen_half.h).
#ifndef NGEN_EMU
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif
__device__ __forceinline__ float ngen_round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
__device__ __forceinline__ float ngen_round_f16(float x) { return __half2float(__float2half_rn(x)); }
// An f32 kept in a 16-bit buffer (attention's log-sum-exp, which backward
// needs to f32 precision): its bits in two elements, the high half first.
__device__ __forceinline__ void ngen_store_f32_bits(__nv_bfloat16 *p, float x) {
  const unsigned u = __float_as_uint(x);
  p[0] = __ushort_as_bfloat16((unsigned short)(u >> 16));
  p[1] = __ushort_as_bfloat16((unsigned short)(u & 0xffffu));
}
__device__ __forceinline__ void ngen_store_f32_bits(__half *p, float x) {
  const unsigned u = __float_as_uint(x);
  p[0] = __ushort_as_half((unsigned short)(u >> 16));
  p[1] = __ushort_as_half((unsigned short)(u & 0xffffu));
}
__device__ __forceinline__ float ngen_load_f32_bits(const __nv_bfloat16 *p) {
  return __uint_as_float((unsigned)__bfloat16_as_ushort(p[0]) << 16 | (unsigned)__bfloat16_as_ushort(p[1]));
}
__device__ __forceinline__ float ngen_load_f32_bits(const __half *p) {
  return __uint_as_float((unsigned)__half_as_ushort(p[0]) << 16 | (unsigned)__half_as_ushort(p[1]));
}
