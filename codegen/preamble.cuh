// Device helpers shared by every generated kernel. Each is defined here
// unless whoever includes this file defined it first (its macro, or an
// NGEN_HOST_* flag): the CPU backend's emulation header does, for the
// helpers it runs faster on a host with the same results, except in its
// GPU-forms test mode, which runs the loops and shuffles as written here.
#ifndef NGEN_DYNAMIC_SHARED
#define NGEN_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#endif

// NGEN_GRID_STRIDE(i, n) visits every i in [0, n) once across the grid, in
// elementwise kernels whose iterations are independent: the usual coalesced
// grid-stride loop. The CPU emulation header defines its own form, which
// runs each worker's share of the grid as one contiguous span.
//
// NGEN_GRID_STRIDE_ROWS(r, j, rows, w) visits the same elements as rows of
// w: every row r in [0, rows) and column j in [0, w), element r*w + j. On
// the GPU it is the same grid-stride loop over elements; the emulation runs
// each worker's rows with an inner loop over j, so what depends on r alone
// leaves the inner loop.
//
// The CPU backend's GPU-forms test mode (runtime/cpu's Options.GPUForms)
// compiles these loops and the warp butterflies below exactly as written,
// so that the tests run the code the GPU runs.
#ifndef NGEN_GRID_STRIDE
#define NGEN_GRID_STRIDE(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
#define NGEN_GRID_STRIDE_ROWS(r, j, rows, w)                                                                     \
  for (long long r##_e = (long long)blockIdx.x * blockDim.x + threadIdx.x; r##_e < (rows) * (long long)(w);     \
       r##_e += (long long)gridDim.x * blockDim.x)                                                               \
    for (long long r = (long long)((unsigned long long)r##_e / (w)), r##_1 = 0; r##_1 < 1; ++r##_1)           \
      for (int j = (int)(r##_e - r * (w)), j##_1 = 0; j##_1 < 1; ++j##_1)
#endif

// NVRTC compiles without <math.h>, which is where INFINITY comes from.
#define NGEN_INF __int_as_float(0x7f800000)

template <typename T> __device__ __forceinline__ T ngen_sq(T x) { return x * x; }

// The CPU emulation defines the f32 GELU itself, with an erf and exp that
// the host compiler vectorises (NGEN_HOST_GELU_F32, ngen_emu.h).
#ifndef NGEN_HOST_GELU_F32
__device__ __forceinline__ float ngen_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
__device__ __forceinline__ float ngen_gelu_grad(float x) {
  return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.39894228040143268f * expf(-0.5f * x * x);
}
#endif
__device__ __forceinline__ double ngen_gelu(double x) { return 0.5 * x * (1.0 + erf(x * 0.70710678118654752)); }
__device__ __forceinline__ double ngen_gelu_grad(double x) {
  return 0.5 * (1.0 + erf(x * 0.70710678118654752)) + x * 0.39894228040143268 * exp(-0.5 * x * x);
}

// ngen_relu is relu: +0 where x <= 0, else x (NaN stays NaN, as in
// torch.relu). The CPU emulation defines it with bit operations
// (NGEN_HOST_RELU, ngen_emu.h).
#ifndef NGEN_HOST_RELU
template <typename T> __device__ __forceinline__ T ngen_relu(T x) { return x <= T(0) ? T(0) : x; }
#endif

// ngen_relu_grad is relu_bwd's gradient: g where y > 0, else 0. The CPU
// emulation defines it with bit operations (NGEN_HOST_RELU_GRAD,
// ngen_emu.h).
#ifndef NGEN_HOST_RELU_GRAD
template <typename T> __device__ __forceinline__ T ngen_relu_grad(T y, T g) { return y > T(0) ? g : T(0); }
#endif

// Butterfly reductions over a warp: every lane ends with the result. The
// CPU emulation header defines them with one warp barrier and the same
// butterfly order, so both give the same bits (NGEN_HOST_WARP_REDUCE).
#ifndef NGEN_HOST_WARP_REDUCE
template <typename T> __device__ __forceinline__ T ngen_warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
template <typename T> __device__ __forceinline__ T ngen_warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    T u = __shfl_xor_sync(0xffffffffu, v, o);
    v = u > v ? u : v;
  }
  return v;
}
#endif

// ngen_arrive counts a block's arrival at one output of a two-phase
// reduction, after its partial is published, and returns how many blocks
// arrived before it: the last one sums the partials (codegen/reduce.go).
// The CPU emulation defines its own (NGEN_HOST_ARRIVE).
#ifndef NGEN_HOST_ARRIVE
__device__ __forceinline__ unsigned ngen_arrive(unsigned *count) {
  __threadfence();
  return atomicAdd(count, 1u);
}
#endif

// Philox4x32-10 (Salmon et al., SC'11), the counter-based generator of
// dropout masks: counter (ctr lo, ctr hi, stream, step lo), key (seed lo,
// seed hi ^ step hi). Its four output words go to w[0..3].
__device__ __forceinline__ void ngen_philox4(unsigned long long seed, unsigned long long step, unsigned stream, unsigned long long ctr, unsigned w[4]) {
  unsigned c0 = (unsigned)ctr, c1 = (unsigned)(ctr >> 32), c2 = stream, c3 = (unsigned)step;
  unsigned k0 = (unsigned)seed, k1 = (unsigned)(seed >> 32) ^ (unsigned)(step >> 32);
  for (int r = 0; r < 10; ++r) {
    const unsigned h0 = __umulhi(0xD2511F53u, c0), l0 = 0xD2511F53u * c0;
    const unsigned h1 = __umulhi(0xCD9E8D57u, c2), l1 = 0xCD9E8D57u * c2;
    const unsigned n0 = h1 ^ c1 ^ k0, n2 = h0 ^ c3 ^ k1;
    c0 = n0; c1 = l1; c2 = n2; c3 = l0;
    k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
  }
  w[0] = c0; w[1] = c1; w[2] = c2; w[3] = c3;
}

// ngen_keep is true with probability keep: element idx takes word idx & 3
// of counter idx >> 2 (all four words of each Philox call are used), as the
// top 24 bits of a float in [0, 1). The mask is a function of (seed, step,
// stream, idx) alone, so every backend, launch shape and fusion plan draws
// the same one. ngen_dropout is the element's factor: scale where kept,
// else 0. Here each thread draws its own element; the CPU emulation
// (ngen_emu.h) defines its own ngen_dropout, which draws the same bits 64
// elements at a time and keeps the kernel loop vectorisable
// (NGEN_HOST_DROPOUT).
#ifndef NGEN_HOST_DROPOUT
__device__ __forceinline__ bool ngen_keep(unsigned long long seed, unsigned long long step, unsigned stream, long long idx, float keep) {
  unsigned w[4];
  ngen_philox4(seed, step, stream, (unsigned long long)idx >> 2, w);
  const unsigned k = (unsigned)idx & 3u; // selects, not w[k]: a dynamic index would put w in local memory
  const unsigned u = (k & 2u) ? ((k & 1u) ? w[3] : w[2]) : ((k & 1u) ? w[1] : w[0]);
  return (float)(u >> 8) * 5.9604644775390625e-08f < keep;
}
__device__ __forceinline__ float ngen_dropout(unsigned long long seed, unsigned long long step, unsigned stream, long long idx, float keep, float scale) {
  return ngen_keep(seed, step, stream, idx, keep) ? scale : 0.0f;
}
// ngen_dropout_if is the factor of a dropout op: ngen_dropout's in training
// mode, 1 otherwise (no draw: train is the same in every thread). The
// emulation's form draws with keep and scale 1 instead, the same factor
// without a branch, so that the host compiler vectorises the loop.
__device__ __forceinline__ float ngen_dropout_if(int train, unsigned long long seed, unsigned long long step, unsigned stream, long long idx, float keep, float scale) {
  return train ? ngen_dropout(seed, step, stream, idx, keep, scale) : 1.0f;
}
#endif
