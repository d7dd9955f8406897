
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
// ngen_ld16 reads element i of a 16-bit array at an index a gather
// computes (pooling windows, columns). The CPU emulation defines its own
// (NGEN_HOST_LD16: a 32-bit load that g++ vectorises as a gather).
#ifndef NGEN_HOST_LD16
template <class T> __device__ __forceinline__ T ngen_ld16(const T *p, long long i) { return p[i]; }
#endif
// The CPU emulation defines ngen_round_f16 itself (NGEN_HOST_ROUND_F16):
// the same bits, widened by arithmetic rather than its table.
#ifndef NGEN_HOST_ROUND_F16
__device__ __forceinline__ float ngen_round_f16(float x) { return __half2float(__float2half_rn(x)); }
#endif
