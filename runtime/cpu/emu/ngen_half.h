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
#include <type_traits>

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

// sel is c ? a : b as bit masks: a ?: lets g++ thread the constant it
// selects into what a kernel computes next. f2h and h2f use it (the f16
// MLP's epoch 9.0 -> 6.1 s). bf16 has both forms, for two uses: a value
// rounded inside a kernel and computed on (ngen_round_bf16, through
// __float2bfloat16_rn) takes the masks, since with a ?: a bf16 value fed
// to a GELU (the gpt's add_gelu_fwd) left that loop scalar ("control
// flow in loop": 31 ms against f32's 3.8; 5.5 ms with the masks); a
// store (the type's constructor) keeps the ?:, which costs a scalar loop
// least: with masks there too, the ConvNet's pooling backward, a 16-bit
// gather that stays scalar, went from 4.3 to 8.2 ms a call (docs/AMP.md).
inline uint32_t sel(bool c, uint32_t a, uint32_t b) {
  const uint32_t m = 0u - (uint32_t)c;
  return (a & m) | (b & ~m);
}

// f2h rounds x to binary16: nearest, ties to even. Branch-free (every
// case is computed and one selected): a normal half adds the rounding
// bias to the bits, with the exponent rebased (a carry out of the
// mantissa moves into the exponent, and from 65520 up into infinity, as
// it should); a subnormal one (below 2^-14) lets the float adder round:
// |x| + 0.5 rounds |x| to a multiple of 2^-24 (to nearest even), whose
// count is the half's bits (the sum is a normal float, so flush-to-zero
// modes cannot touch it); from 65536 up the result is infinity, and every
// NaN is 0x7fff. (An integer-only form, a shift with the remainder
// rounded, vectorises in a loop of its own but made the emulated cast
// kernels twice as slow: measured on the f16 MLP, 2.4 against 1.2 ms for
// fc1's weight cast.)
inline uint16_t f2h(float x) {
  const uint32_t u = bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  const uint32_t sub = bits(from_bits(a) + 0.5f) - 0x3f000000u;
  uint32_t h = sel(a < 0x38800000u, sub, normal);
  h = sel(a >= 0x47800000u, 0x7c00u, h);
  return (uint16_t)sel(a > 0x7f800000u, 0x7fffu, h | sign); // NaN: canonical
}

// h2f widens a binary16 to float (exact), branch-free: the exponent
// rebased by 112; infinity and NaN rebased again to float's all-ones
// exponent; zero and subnormals (exponent field 0) normalised by the
// float adder: m·2^-24 is (2^-14 + m·2^-24) - 2^-14, exact (both
// operands normal floats, the result 0 or at least 2^-24).
inline float h2f_bits(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = h & 0x7c00u;
  const uint32_t o = ((uint32_t)(h & 0x7fffu) << 13) + (112u << 23);
  const uint32_t special = o + (112u << 23);
  const uint32_t sub = bits(from_bits(o + (1u << 23)) - from_bits(113u << 23));
  const uint32_t r = sel(e == 0x7c00u, special, sel(e == 0, sub, o));
  return from_bits(r | sign);
}

// h2f is h2f_bits read from a table of all 65536 halves (256 KB, built
// once a process, at load): one load where the arithmetic is some fifteen
// operations, which is what an f16 kernel whose loop stays scalar pays
// per element read (the ConvNet's col2im reads nine: 17.6 ms a step in
// f16 against bf16's 2.9). Same bits: the table is h2f_bits.
struct H2FTable {
  float t[65536];
  H2FTable() {
    for (int i = 0; i < 65536; ++i)
      t[i] = h2f_bits((uint16_t)i);
  }
};
inline const float *h2f_table() {
  static const H2FTable tab;
  return tab.t;
}
inline const float *const h2f_tab = h2f_table();
inline float h2f(uint16_t h) { return h2f_tab[h]; }
// The table serves a half read from memory; a value rounded in a kernel
// (ngen_round_f16, below) widens by arithmetic, which a vectorised loop
// does faster than a gather.

// f2bf rounds x to bfloat16: nearest, ties to even; the store's form
// (a ?: for NaN). f2bf_sel is the same rounding with the select as masks,
// for values computed on (sel, above).
inline uint16_t f2bf(float x) {
  const uint32_t u = bits(x);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? 0x7fffu : r); // NaN: canonical
}
inline uint16_t f2bf_sel(float x) {
  const uint32_t u = bits(x);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
  return (uint16_t)sel((u & 0x7fffffffu) > 0x7f800000u, 0x7fffu, r);
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

inline __nv_bfloat16 __float2bfloat16_rn(float f) { // f2bf_sel: ngen_round_bf16 rounds through it
  __nv_bfloat16 b;
  b.x = ngen_half::f2bf_sel(f);
  return b;
}
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

// nvcuda::wmma for the 16-bit kernels that multiply on tensor cores
// (attention's tensor-core form, compiler/ops/attention_mma.go). A
// fragment's split across the warp's lanes is the hardware's and
// unspecified, so kernels only load, store, fill and multiply whole
// fragments. Here every lane holds the whole tile, widened to float (a
// 16-bit element widens exactly), and every lane computes the whole
// product: the same values in each lane, so a store by all 32 lanes
// writes each element 32 times with one value. mma_sync sums the 16
// products of an element in k order, in float: tensor cores add them in
// an order (and with intermediate roundings) of their own, so results
// agree with a GPU's to f32 sums, not bit for bit. The functions are
// out of line: inlined into every call site of every kernel copy, they
// made the host build of a bf16 TransformerLM 40% slower to compile.
namespace nvcuda {
namespace wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
  enum { R = std::is_same<Use, matrix_b>::value ? K : M, C = std::is_same<Use, matrix_a>::value ? K : N };
  float e[R * C]; // element (r, c) of the tile at r * C + c
};
template <class Use, int M, int N, int K, class T, class L, class V>
__attribute__((noinline)) void fill_fragment(fragment<Use, M, N, K, T, L> &f, const V &v) {
  for (int i = 0; i < fragment<Use, M, N, K, T, L>::R * fragment<Use, M, N, K, T, L>::C; i++)
    f.e[i] = float(v);
}
template <class Use, int M, int N, int K, class T, class L>
__attribute__((noinline)) void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm) {
  typedef fragment<Use, M, N, K, T, L> F;
  for (int r = 0; r < F::R; r++)
    for (int c = 0; c < F::C; c++)
      f.e[r * F::C + c] = float(std::is_same<L, row_major>::value ? p[(long)r * ldm + c] : p[(long)c * ldm + r]);
}
template <int M, int N, int K>
__attribute__((noinline)) void load_matrix_sync(fragment<accumulator, M, N, K, float> &f, const float *p, unsigned ldm, layout_t l) {
  for (int r = 0; r < M; r++)
    for (int c = 0; c < N; c++)
      f.e[r * N + c] = l == mem_row_major ? p[(long)r * ldm + c] : p[(long)c * ldm + r];
}
template <int M, int N, int K>
__attribute__((noinline)) void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ldm, layout_t l) {
  for (int r = 0; r < M; r++)
    for (int c = 0; c < N; c++)
      (l == mem_row_major ? p[(long)r * ldm + c] : p[(long)c * ldm + r]) = f.e[r * N + c];
}
template <int M, int N, int K, class T, class LA, class LB>
__attribute__((noinline)) void mma_sync(fragment<accumulator, M, N, K, float> &d, const fragment<matrix_a, M, N, K, T, LA> &a,
                     const fragment<matrix_b, M, N, K, T, LB> &b, const fragment<accumulator, M, N, K, float> &c) {
  float out[M * N];
  for (int r = 0; r < M; r++)
    for (int col = 0; col < N; col++) {
      float s = c.e[r * N + col];
      for (int k = 0; k < K; k++)
        s += a.e[r * K + k] * b.e[k * N + col];
      out[r * N + col] = s;
    }
  memcpy(d.e, out, sizeof out);
}
} // namespace wmma
} // namespace nvcuda

// preamble_half.cuh's ngen_ld16 (it leaves its own out): element i of a
// 16-bit array that a gather reads at a computed index, as the low half
// of the 32-bit word at its byte offset. g++ vectorises a 16-bit load at a
// non-affine index not at all (there is no 16-bit gather) but a 32-bit one
// as vpgatherdd (scale 2): a bf16 pooling backward 1.2 → 0.4 ms. The word
// reaches 2 bytes past the element; runtime/cpu pads every allocation.
#define NGEN_HOST_LD16 1
template <class T> inline T ngen_ld16(const T *p, long long i) {
  uint32_t w;
  memcpy(&w, (const char *)p + 2 * i, 4);
  T r;
  r.x = (uint16_t)w; // little-endian: the element is the low half
  return r;
}

// preamble_half.cuh's ngen_round_f16 (it leaves its own out): a value
// rounded to f16 inside a kernel, widened by h2f_bits's arithmetic, which
// vectorises, rather than by the table (a gather): the f16 MLP's weight
// casts took 689 µs through the table against 450.
inline float ngen_round_f16(float x) { return ngen_half::h2f_bits(ngen_half::f2h(x)); }
#define NGEN_HOST_ROUND_F16 1
#endif // __CUDACC__

#endif // NGEN_HALF_H
