// ngen_half.h: the 16-bit floating-point types of the generated kernels,
// the same text for nvcc and for the host.
//
// Under nvcc it is CUDA's own cuda_fp16.h and cuda_bf16.h. On the host (the
// CPU backend, which must build without the CUDA toolkit) it defines
// __half, __half2, __nv_bfloat16 and __nv_bfloat162 with the conversions of
// CUDA's headers, bit for bit: __float2half_rn and __float2bfloat16_rn
// round to nearest, ties to even, overflow to infinity, keep subnormals,
// and give the canonical NaN 0x7fff for every NaN, as CUDA's do.
// runtime/cpu/emu's TestHalfConversions holds them equal to CUDA's on
// every one of the 2^32 floats (and every 16-bit pattern back).
//
// Arithmetic on the types is float arithmetic rounded once: a float holds
// 24 significand bits, at least 2p+2 for p = 11 (half) and p = 8
// (bfloat16), so a sum, difference, product or quotient of two such
// values computed in float and rounded to the type is the correctly
// rounded result, which is what the GPU's half instructions give.
#ifndef NGEN_HALF_H
#define NGEN_HALF_H

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#else
#include <stdint.h>
#include <string.h>

namespace ngen_half {
inline uint32_t bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
inline float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// f2h rounds x to binary16: nearest, ties to even.
inline uint16_t f2h(float x) {
  const uint32_t u = bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fffu;                    // NaN: canonical
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // >= 65520 (65504 + half an ulp): infinity
  if (a <= 0x33000000u) return (uint16_t)sign;             // <= 2^-25, half the smallest subnormal: zero
  const uint32_t e = a >> 23;
  uint32_t m = a & 0x7fffffu;
  if (e < 113) { // below 2^-14: a subnormal half, in units of 2^-24
    m |= 0x800000u;
    const uint32_t shift = 126 - e; // 14..24
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    r += rem > halfway || (rem == halfway && (r & 1));
    return (uint16_t)(sign | r);
  }
  uint32_t h = ((e - 112) << 10) | (m >> 13);
  const uint32_t rem = m & 0x1fffu;
  h += rem > 0x1000u || (rem == 0x1000u && (h & 1)); // a carry moves into the exponent, as it should
  return (uint16_t)(sign | h);
}

// h2f widens a binary16 to float (exact).
inline float h2f(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return from_bits(sign | 0x7f800000u | (m << 13));
  if (e) return from_bits(sign | ((e + 112) << 23) | (m << 13));
  if (!m) return from_bits(sign);
  e = 113; // a subnormal: normalise
  while (!(m & 0x400u)) {
    m <<= 1;
    e--;
  }
  return from_bits(sign | (e << 23) | ((m & 0x3ffu) << 13));
}

// f2bf rounds x to bfloat16: nearest, ties to even.
inline uint16_t f2bf(float x) {
  uint32_t u = bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu; // NaN: canonical
  u += 0x7fffu + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}

inline float bf2f(uint16_t b) { return from_bits((uint32_t)b << 16); }
} // namespace ngen_half

// The types hold their bits; conversions go through the functions below,
// as CUDA code writes them. Arithmetic and comparisons go through float.
#define NGEN_HALF_TYPE(T, TO, FROM)                                                 \
  struct T {                                                                         \
    uint16_t x;                                                                      \
    T() = default;                                                                   \
    T(float f) : x(ngen_half::TO(f)) {}                                              \
    operator float() const { return ngen_half::FROM(x); }                            \
    T &operator+=(T b) { return *this = T(float(*this) + float(b)); }                \
    T &operator-=(T b) { return *this = T(float(*this) - float(b)); }                \
    T &operator*=(T b) { return *this = T(float(*this) * float(b)); }                \
    T &operator/=(T b) { return *this = T(float(*this) / float(b)); }                \
  };                                                                                 \
  inline T operator+(T a, T b) { return T(float(a) + float(b)); }                    \
  inline T operator-(T a, T b) { return T(float(a) - float(b)); }                    \
  inline T operator*(T a, T b) { return T(float(a) * float(b)); }                    \
  inline T operator/(T a, T b) { return T(float(a) / float(b)); }                    \
  inline T operator-(T a) {                                                          \
    T r;                                                                             \
    r.x = a.x ^ 0x8000u;                                                             \
    return r;                                                                        \
  }

NGEN_HALF_TYPE(__half, f2h, h2f)
NGEN_HALF_TYPE(__nv_bfloat16, f2bf, bf2f)
#undef NGEN_HALF_TYPE

struct __half2 {
  __half x, y;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline float __half2float(__half h) { return float(h); }
inline __half __ushort_as_half(unsigned short u) {
  __half h;
  h.x = u;
  return h;
}
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline __half2 __float2half2_rn(float a) { return __half2{__half(a), __half(a)}; }
inline float __low2float(__half2 h) { return float(h.x); }
inline float __high2float(__half2 h) { return float(h.y); }
inline bool __hisnan(__half h) { return (h.x & 0x7fffu) > 0x7c00u; }
inline bool __hisinf(__half h) { return (h.x & 0x7fffu) == 0x7c00u; }

inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return float(b); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 b;
  b.x = u;
  return b;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.x; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(a)}; }
inline float __low2float(__nv_bfloat162 b) { return float(b.x); }
inline float __high2float(__nv_bfloat162 b) { return float(b.y); }
#endif // __CUDACC__

#endif // NGEN_HALF_H
