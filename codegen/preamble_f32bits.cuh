// An f32 kept in a 16-bit buffer (attention's log-sum-exp under mixed
// precision, which backward needs to f32 precision): its bits in two
// elements, the high half first. Only programs with a 16-bit attention
// include this (after preamble_half.cuh).
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
