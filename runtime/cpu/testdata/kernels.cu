// Hand-written kernels for runtime/cpu's tests. They are ordinary CUDA C:
// nvcc compiles this file unchanged (TestNvccCompilesTestKernels) and the CPU
// backend runs it through ngen_emu.h, so each test checks the emulation
// against the semantics a GPU would give.

// On the GPU (nvcc), codegen's device helpers, as every generated .cu
// starts with them; under the emulation its header defines what the tests
// use (ngen_warp_sum and ngen_warp_max in one warp barrier).
#ifndef NGEN_EMU
#include "../../../codegen/preamble.cuh"
#endif

#ifndef NGEN_DYNAMIC_SHARED
#define NGEN_DYNAMIC_SHARED(T, name) \
  extern __shared__ unsigned char ngen_dynamic_smem_[]; \
  T *name = reinterpret_cast<T *>(ngen_dynamic_smem_)
#endif

// y = relu(a + b): one thread per element, no barriers (NGEN_RUN_SIMPLE).
__global__ void add_relu_fwd(const float *__restrict__ a, const float *__restrict__ b,
                             float *__restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(a[i] + b[i], 0.0f);
}

// y += alpha * x over a 2-D grid of 2-D blocks, with 64-bit sizes.
__global__ void axpy_f64(double alpha, const double *x, double *y, long long n) {
  long long block = blockIdx.x + (long long)blockIdx.y * gridDim.x;
  long long t = threadIdx.x + threadIdx.y * blockDim.x;
  long long i = block * (blockDim.x * blockDim.y) + t;
  if (i < n) y[i] += alpha * x[i];
}

// out[row] = sum of x[row, :]: one block per row, a strided partial sum per
// thread, then a shared-memory tree. blockDim.x must be a power of two.
__global__ void sum_rows_tree(const float *x, float *out, int cols) {
  NGEN_DYNAMIC_SHARED(float, partial);
  const float *row = x + (long long)blockIdx.x * cols;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += row[c];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

// out[block] = sum of this block's grid-stride share of x: warp shuffles
// reduce each warp, shared memory combines the warps (blockDim.x == 256).
__global__ void sum_warp_shuffle(const float *x, float *out, int n) {
  __shared__ float warp_sums[8];
  float s = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += x[i];
  for (int off = warpSize / 2; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
  int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  if (lane == 0) warp_sums[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < (int)(blockDim.x / warpSize) ? warp_sums[lane] : 0.0f;
    for (int off = warpSize / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) out[blockIdx.x] = s;
  }
}

// Records what every shuffle flavour returns, for a block whose last warp
// is partial; int, unsigned and double payloads.
__global__ void shuffle_probe(int *out, double *outd) {
  int t = threadIdx.x;
  int *o = out + 4 * t;
  o[0] = __shfl_sync(0xffffffffu, t * 10, 3);
  o[1] = (int)__shfl_up_sync(0xffffffffu, (unsigned)t, 1);
  o[2] = __shfl_down_sync(0xffffffffu, t, 1);
  o[3] = __shfl_xor_sync(0xffffffffu, t, 5);
  outd[t] = __shfl_down_sync(0xffffffffu, 0.5 * t, 2);
}

// Per thread: ngen_warp_sum, the same butterfly by shuffles, ngen_warp_max
// and its shuffle form, twice in a row (the second of -x) so consecutive
// reductions must not see each other's results.
__global__ void warp_reduce_probe(const float *x, float *out) {
  const int t = threadIdx.x;
  for (int k = 0; k < 2; k++) {
    const float v = k == 0 ? x[t] : -x[t];
    float s = v, m = v;
    for (int o = 16; o > 0; o >>= 1) {
      s += __shfl_xor_sync(0xffffffffu, s, o);
      const float u = __shfl_xor_sync(0xffffffffu, m, o);
      m = u > m ? u : m;
    }
    float *o = out + 8 * t + 4 * k;
    o[0] = ngen_warp_sum(v);
    o[1] = s;
    o[2] = ngen_warp_max(v);
    o[3] = m;
  }
}

// Threads past n return before the barrier; the rest must still pass it.
__global__ void early_exit_sync(int *out, int n) {
  __shared__ int s[1024];
  int t = threadIdx.x;
  if (t >= n) return;
  s[t] = t;
  int multiples_of_3 = __syncthreads_count(t % 3 == 0);
  out[2 * t] = s[n - 1 - t];
  out[2 * t + 1] = multiples_of_3;
}

// bins[v] counts occurrences: contended global atomics from many blocks.
__global__ void histogram(const int *x, unsigned *bins, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(&bins[x[i]], 1u);
}

// total += sum(x), plus max(x), with float-typed atomics.
__global__ void atomic_sum_max(const double *x, double *total, int *max_seen, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    atomicAdd(total, x[i]);
    atomicMax(max_seen, (int)x[i]);
  }
}

// Half the block waits at one __syncthreads, half at another: on a GPU this
// hangs or corrupts; the CPU backend must report it.
__global__ void divergent_sync(float *out) {
  if (threadIdx.x < 32) {
    __syncthreads();
    out[threadIdx.x] = 1.0f;
  } else {
    __syncthreads();
    out[threadIdx.x] = 2.0f;
  }
}

// Half of each warp waits at a block barrier, the other half in a shuffle
// that needs the first half: neither can complete.
__global__ void warp_block_deadlock(float *out) {
  float v = threadIdx.x;
  if (threadIdx.x % 32 < 16) __syncthreads();
  else v = __shfl_down_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

// Evaluates the math and bit intrinsics the code generator may emit, so the
// emulation is checked against Go's math (and nvcc checks the spelling).
__global__ void math_probe(const float *x, float *outf, double *outd, unsigned *outu, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = __ldg(&x[i]);
  float *f = outf + 24 * i;
  f[0] = expf(v); f[1] = logf(fabsf(v) + 1.0f); f[2] = sqrtf(fabsf(v)); f[3] = rsqrtf(fabsf(v) + 1.0f);
  f[4] = tanhf(v); f[5] = fmaxf(v, 0.5f); f[6] = fminf(v, 0.5f); f[7] = powf(fabsf(v), 1.5f);
  f[8] = erff(v); f[9] = log1pf(fabsf(v)); f[10] = expm1f(v); f[11] = fmaf(v, 2.0f, 1.0f);
  f[12] = floorf(v); f[13] = ceilf(v); f[14] = __expf(v); f[15] = __logf(fabsf(v) + 1.0f);
  f[16] = __fdividef(v, 3.0f); f[17] = __frcp_rn(v + 10.0f);
  float zero = v - v;  // a run-time zero, so nothing folds the divisions
  f[18] = __int_as_float(__float_as_int(v)); f[19] = isnan(v / zero) ? 1.0f : 0.0f;
  f[20] = isinf(v / zero) ? 1.0f : 0.0f; f[21] = -INFINITY < v ? 1.0f : 0.0f;
  f[22] = (float)max(i, 3) + (float)min(7u, (unsigned)i); f[23] = 0.0f;
  double dv = v;
  double *d = outd + 10 * i;
  d[0] = exp(dv); d[1] = log(fabs(dv) + 1.0); d[2] = sqrt(fabs(dv)); d[3] = rsqrt(fabs(dv) + 1.0);
  d[4] = tanh(dv); d[5] = fmax(dv, 0.5) + fmin(dv, 0.5); d[6] = pow(fabs(dv), 1.5); d[7] = erf(dv);
  d[8] = log1p(fabs(dv)); d[9] = fabs(dv);
  unsigned *u = outu + 4 * i;
  u[0] = __umulhi(0x80000001u, (unsigned)i + 3u);
  u[1] = (unsigned)(__umul64hi(0xFFFFFFFFFFFFFFFFull, (unsigned long long)i + 5ull));
  u[2] = (unsigned)atomicCAS((int *)&u[3], 0, 7);  // returns 0, stores 7 in u[3]
  atomicExch(&u[2], u[2] + 1u);
}

// An elementwise kernel in the generator's grid-stride form: the emulation
// runs it as one contiguous span per worker (NGEN_RUN_SPAN), vectorised,
// with the SSE sqrtf; each result must match IEEE sqrt bit for bit.
#ifndef NGEN_GRID_STRIDE
#define NGEN_GRID_STRIDE(i, n) for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)
#endif
__global__ void span_sqrt(const float *x, float *y, long long n) {
  NGEN_GRID_STRIDE(i, n) { y[i] = sqrtf(x[i]); }
}

// Records each block's width: marked KernelInfo.SoloBlocks in the tests,
// the CPU backend launches it with one-thread blocks unless
// Options.GPUBlocks asks for the launch's own.
__global__ void block_width(int *out) {
  __syncthreads();
  if (threadIdx.x == 0)
    out[blockIdx.x] = blockDim.x;
}
