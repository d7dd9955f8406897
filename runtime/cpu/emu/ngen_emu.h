/* ngen_emu.h: runs ngen's generated CUDA C on the host.
 *
 * The generated .cu is compiled by g++ -std=c++17 with this header included
 * first. Blocks run in parallel on OS threads (one cgo call per worker, each
 * given a range of linear block ids); a block's threads run on one OS thread,
 * either as a plain loop (NGEN_RUN_SIMPLE) or as cooperative fibers
 * (NGEN_RUN_SYNC) when the kernel uses __syncthreads or warp shuffles.
 *
 * Compiled as C (from runtime/cpu's cgo preamble) only the launch contract
 * below is visible, so Go and C++ share one definition of ngen_launch.
 */
#ifndef NGEN_EMU_H
#define NGEN_EMU_H

/* Code included after this header knows it runs under the emulation. */
#ifndef NGEN_EMU
#define NGEN_EMU 1
#endif

/* A fiber pool (stacks, block state, dynamic shared memory) that the
 * caller lends one launch worker through ngen_launch.pool. Every module
 * the worker runs uses it, so a process's fiber stacks grow with its
 * workers rather than with workers x modules x OS threads (a pool per
 * module and OS thread exhausted vm.max_map_count after a few hundred
 * modules in one process). The first module that needs it creates it
 * and stores it in *pool; the caller frees it with destroy, a function
 * of the module that made it (modules are never unloaded). A module
 * whose header's pool differs (abi, bytes) uses a pool of its own. */
typedef struct ngen_pool_head {
  unsigned abi;   /* NGEN_POOL_ABI of the header that made it */
  unsigned bytes; /* the size of its pool */
  void (*destroy)(struct ngen_pool_head *);
} ngen_pool_head;

/* Bump when the pool's layout (Pool, Fiber, Warp, the stack size) changes. */
#define NGEN_POOL_ABI 1u

typedef struct ngen_launch {
  unsigned grid[3], block[3];
  int shared_bytes;
  void **args; /* args[i] points at the value of kernel parameter i */
  long long block_begin; /* run linear block ids [block_begin, block_end) */
  long long block_end;
  int forms; /* which form of a kernel to run: an NGEN_FORMS_* value */
  /* The worker's pool slot, or null for a pool per module and OS thread
   * (freed at thread exit). No two workers running at once share a slot. */
  ngen_pool_head **pool;
} ngen_launch;

/* ngen_launch.forms: the CPU backend's forms (runtime.KernelInfo.Host), the
 * baseline forms (KernelInfo.Baseline, cpu.Options.Baseline), or the CUDA
 * forms with the launch's own blocks (cpu.Options.GPUBlocks). */
enum { NGEN_FORMS_HOST = 0, NGEN_FORMS_BASELINE = 1, NGEN_FORMS_CUDA = 2 };

/* Statuses returned by NGEN_RUN_*; runtime/cpu turns them into errors. */
enum {
  NGEN_OK = 0,
  NGEN_ERR_DEADLOCK = 1,        /* live threads wait on barriers that cannot complete */
  NGEN_ERR_DIVERGENT_SYNC = 2,  /* all live threads wait, at different __syncthreads */
  NGEN_ERR_LAUNCH = 3,          /* bad block shape, or no memory for stacks/shared */
  NGEN_ERR_SYNC_IN_SIMPLE = 4   /* a barrier or shuffle ran under NGEN_RUN_SIMPLE */
};

#ifdef __cplusplus

#include <math.h>
#include <new>
#include <type_traits>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__x86_64__) && !defined(NGEN_EMU_UCONTEXT)
#define NGEN_EMU_UCONTEXT 1
#endif
#ifdef NGEN_EMU_UCONTEXT
#include <ucontext.h>
#endif
#include <sys/mman.h>
#include <unistd.h>

/* __nv_bfloat16 and __half with CUDA's conversions, bit for bit. Package
 * emu's Header carries ngen_half.h's text in place of this line, so the
 * header stays one file wherever it is copied. */
#include "ngen_half.h"

/* sqrtf for kernels that the host compiler can vectorise. CUDA's sqrtf is
 * IEEE-rounded and never sets errno; the C library's may set errno, so g++
 * keeps every call scalar (and a loop that contains one unvectorised)
 * unless built with -fno-math-errno, a flag cgo does not accept and that
 * #pragma GCC optimize does not apply. Instead ngen_sqrtf is declared with
 * GCC's simd attribute, which promises a 4-lane SSE variant under the
 * x86-64 vector ABI name _ZGVbN4v_ngen_sqrtf. Both are defined here as weak
 * aliases (every generated package carries them, and a binary may link
 * several) of sqrtss and sqrtps, which are exactly rounded like CUDA's
 * sqrtf; the AVX and AVX-512 variants serve builds with -mavx or
 * -march=native in CGO_CXXFLAGS. Elsewhere ngen_sqrtf is plain sqrtf. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
extern "C" __attribute__((simd("notinbranch"), const, nothrow)) float ngen_sqrtf(float x);
extern "C" __attribute__((used)) inline float ngen_sqrtf_1(float x) { return _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(x))); }
extern "C" __attribute__((used)) inline __m128 ngen_sqrtf_4(__m128 x) { return _mm_sqrt_ps(x); }
extern "C" __attribute__((used, target("avx"))) inline __m256 ngen_sqrtf_8(__m256 x) { return _mm256_sqrt_ps(x); }
extern "C" __attribute__((used, target("avx512f"))) inline __m512 ngen_sqrtf_16(__m512 x) { return _mm512_mask_sqrt_ps(x, (__mmask16)-1, x); }
__asm__(".weak ngen_sqrtf\n.set ngen_sqrtf, ngen_sqrtf_1\n"
        ".weak _ZGVbN4v_ngen_sqrtf\n.set _ZGVbN4v_ngen_sqrtf, ngen_sqrtf_4\n"
        ".weak _ZGVcN8v_ngen_sqrtf\n.set _ZGVcN8v_ngen_sqrtf, ngen_sqrtf_8\n"
        ".weak _ZGVdN8v_ngen_sqrtf\n.set _ZGVdN8v_ngen_sqrtf, ngen_sqrtf_8\n"
        ".weak _ZGVeN16v_ngen_sqrtf\n.set _ZGVeN16v_ngen_sqrtf, ngen_sqrtf_16\n");
#else
inline float ngen_sqrtf(float x) { return sqrtf(x); }
#endif

/* Kernels are compiled for the GPU with nvcc --ftz=true (codegen.NVCCFlags):
 * single-precision denormals flush to zero, which the GPU does at full
 * speed. The emulation runs every kernel in the same mode (x86 MXCSR FTZ and
 * DAZ), restoring the caller's mode afterwards. Without it each denormal
 * operand costs a microcode assist of about a hundred cycles, and Adam's
 * moment estimates for rarely active weights decay into denormals: that
 * made the optimizer step nine times slower from the second epoch on. The
 * x86 mode also flushes double denormals (below 2.2e-308), which the GPU
 * keeps; no f64 use here (gradient checks) gets near them. */
#if defined(__x86_64__)
#include <xmmintrin.h>
struct ngen_flush_denormals {
  unsigned saved;
  ngen_flush_denormals() : saved(_mm_getcsr()) { _mm_setcsr(saved | 0x8040u); /* FTZ | DAZ */ }
  ~ngen_flush_denormals() { _mm_setcsr(saved); }
};
#else
struct ngen_flush_denormals {}; /* other hosts keep denormals: results may differ below 1.2e-38 */
#endif

#define NGEN_ARG(l, T, i) (*(T *)((l)->args[i]))
/* A pointer argument for an entry that knows only that parameter i is a
 * pointer (runtime/cpu's GPU-forms entry, built from KernelInfo.Params):
 * it converts to whatever pointer type the kernel declares. */
namespace {
struct ngen_ptr_arg {
  void *p;
  template <class T> operator T *() const { return static_cast<T *>(p); }
};
} // namespace
#define NGEN_PTR_ARG(l, i) (ngen_ptr_arg{*(void **)((l)->args[i])})

/* For the kernels included after this header: generated kernels may ignore
 * parameters, and CUDA code routinely compares int against the unsigned
 * threadIdx/blockDim, which nvcc does not warn about either. */
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"

/* Kernels are always inlined so NGEN_RUN_SIMPLE's thread loop becomes one
 * loop the compiler can optimise as a whole. */
#define __global__ inline __attribute__((always_inline))
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __constant__
#define __align__(n) __attribute__((aligned(n)))
/* A block's threads all run on one OS thread and blocks on one OS thread run
 * one after another, so thread-local storage is exactly block-shared. */
#define __shared__ static thread_local
#define NGEN_DYNAMIC_SHARED(T, name) T *name = reinterpret_cast<T *>(::ngen_emu::dyn_shared)
/* A kernel's host form (runtime.KernelInfo.Host): an ordinary function of
 * the host glue, inlined into its launcher like the kernels. */
#define NGEN_HOST_FORM inline __attribute__((always_inline))

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

/* Everything else has internal linkage, so two generated packages linked
 * into one binary cannot clash even if built from different header versions. */
namespace {

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
thread_local dim3 blockDim;
thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace ngen_emu {

thread_local void *dyn_shared;
thread_local int simple_misuse; /* set when a barrier runs without fibers */
/* Set while run_own_stack runs a kernel form as one-thread blocks
 * without fibers: a barrier or warp exchange of one thread is then trivial
 * (it returns the thread's own value), not a misuse. */
thread_local int solo_block;

/* ---- fibers --------------------------------------------------------- */

enum { kStackBytes = 64 << 10, kMaxThreads = 1024 };

struct Block;
struct Fiber {
  void *sp; /* saved stack pointer (x86-64 switch) */
#ifdef NGEN_EMU_UCONTEXT
  ucontext_t uc;
#endif
  char *stack; /* lowest usable byte; a guard page sits below it */
  uint3 tid;
  int waiting; /* 0 runnable, 1 block barrier, 2 warp barrier, 3 exited */
};

struct Warp {
  int live, arrived;
  unsigned seq; /* parity picks the exchange buffer of the next shuffle */
  unsigned long long xchg[2][32];
  unsigned reduced;              /* seq of the reduction in result (warp_butterfly) */
  unsigned long long result[32]; /* its per-lane results */
};

struct Block {
  Fiber *fibers;
  Warp *warps;
  int nthreads, live, cur, status;
  int *queue; /* ring of runnable fibers, never including cur */
  int qhead, qlen;
  int arrived;           /* at the block barrier */
  const void *site;      /* where the first of them arrived */
  int divergent;         /* someone arrived at a different site */
  int pred_count, pred_result, pred_arrived;
  void (*fn)(void *);
  void *fn_ctx;
#ifdef NGEN_EMU_UCONTEXT
  ucontext_t main_uc;
#else
  void *main_sp;
#endif
};

thread_local Block *cur_block; /* null under NGEN_RUN_SIMPLE */

/* A launch worker's pool (ngen_pool_head), reused across blocks, launches
 * and modules. */
struct Pool {
  ngen_pool_head head = {NGEN_POOL_ABI, sizeof(Pool), nullptr};
  Fiber fibers[kMaxThreads];
  Warp warps[kMaxThreads / 32];
  int queue[kMaxThreads];
  int nstacks = 0;
  void *shared = nullptr;
  size_t shared_cap = 0;
  ~Pool() {
    for (int i = 0; i < nstacks; i++)
      munmap(fibers[i].stack - getpagesize(), kStackBytes + getpagesize());
    free(shared);
  }
  bool reserve(int n) {
    long page = getpagesize();
    for (; nstacks < n; nstacks++) {
      void *m = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
      if (m == MAP_FAILED)
        return false;
      /* Overflowing a fiber stack faults instead of corrupting a neighbour. */
      mprotect(m, page, PROT_NONE);
      fibers[nstacks].stack = static_cast<char *>(m) + page;
    }
    return true;
  }
  bool reserve_shared(size_t bytes) {
    if (bytes <= shared_cap)
      return true;
    void *p = aligned_alloc(64, (bytes + 63) & ~size_t(63));
    if (!p)
      return false;
    free(shared);
    shared = p;
    shared_cap = bytes;
    return true;
  }
};
thread_local Pool *pool;

inline void destroy_pool(ngen_pool_head *h) { delete reinterpret_cast<Pool *>(h); }

/* get_pool returns the launch worker's pool (see ngen_pool_head), made on
 * first use so NGEN_RUN_SIMPLE-only launches pay nothing; without a slot,
 * or with another header's pool in it, a pool of this module's own for
 * this OS thread, which a thread_local owner frees at thread exit. */
inline Pool *get_pool(const ngen_launch *l) {
  static_assert(std::is_standard_layout<Pool>::value, "Pool must start with its ngen_pool_head");
  if (l->pool) {
    ngen_pool_head *h = *l->pool;
    if (!h) {
      Pool *p = new (std::nothrow) Pool;
      if (!p)
        return nullptr;
      p->head.destroy = destroy_pool;
      *l->pool = &p->head;
      return p;
    }
    if (h->abi == NGEN_POOL_ABI && h->bytes == sizeof(Pool))
      return reinterpret_cast<Pool *>(h);
  }
  static thread_local struct Owner {
    Pool *p = nullptr;
    ~Owner() { delete p; }
  } owner;
  if (!pool) {
    owner.p = new (std::nothrow) Pool;
    pool = owner.p;
  }
  return pool;
}

#ifndef NGEN_EMU_UCONTEXT
/* swapcontext saves and restores the signal mask with a syscall per switch;
 * fibers only need the callee-saved registers of the SysV ABI. It ends in an
 * indirect jump rather than ret: a ret here always misses the return-stack
 * predictor, which cost a third of a switch. */
__attribute__((naked, noinline, unused)) void switch_stack(void ** /*save*/, void * /*to*/) {
  __asm__ volatile(
      "pushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\t"
      "pushq %r14\n\tpushq %r15\n\t"
      "movq %rsp, (%rdi)\n\tmovq %rsi, %rsp\n\t"
      "popq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\t"
      "popq %rbx\n\tpopq %rbp\n\tpopq %rcx\n\tjmpq *%rcx\n");
}
/* First code a fiber runs: r12 holds the Block, r13 the entry function. */
__attribute__((naked, noinline, unused)) void fiber_start() {
  __asm__ volatile("movq %r12, %rdi\n\tcallq *%r13\n\tud2\n");
}
#endif

inline void switch_to(Block *b, Fiber *from, int to) {
  Fiber *f = &b->fibers[to];
  b->cur = to;
  threadIdx = f->tid;
#ifdef NGEN_EMU_UCONTEXT
  swapcontext(&from->uc, &f->uc);
#else
  switch_stack(&from->sp, f->sp);
#endif
}

/* Leaves the block for the worker's own stack; the fibers are abandoned. */
inline void switch_to_main(Block *b, Fiber *from) {
#ifdef NGEN_EMU_UCONTEXT
  swapcontext(&from->uc, &b->main_uc);
#else
  switch_stack(&from->sp, b->main_sp);
#endif
}

inline void make_ready(Block *b, int i) {
  b->fibers[i].waiting = 0;
  b->queue[(b->qhead + b->qlen++) % b->nthreads] = i;
}

/* Runs the next runnable fiber; with none left the block is over. */
inline void yield_blocked(Block *b) {
  Fiber *self = &b->fibers[b->cur];
  if (b->qlen == 0) {
    if (b->live > 0 && b->status == NGEN_OK)
      b->status = b->divergent ? NGEN_ERR_DIVERGENT_SYNC : NGEN_ERR_DEADLOCK;
    switch_to_main(b, self);
    __builtin_unreachable();
  }
  int next = b->queue[b->qhead];
  b->qhead = (b->qhead + 1) % b->nthreads;
  b->qlen--;
  switch_to(b, self, next);
}

/* Releases barriers that the arrival or exit of a thread completed. */
inline void release_block(Block *b) {
  if (b->arrived == 0 || b->arrived != b->live || b->divergent)
    return;
  b->pred_result = b->pred_count;
  b->pred_arrived = b->arrived;
  b->arrived = b->pred_count = 0;
  for (int i = 0; i < b->nthreads; i++)
    if (b->fibers[i].waiting == 1 && i != b->cur)
      make_ready(b, i);
  if (b->fibers[b->cur].waiting == 1)
    b->fibers[b->cur].waiting = 0;
}

inline void release_warp(Block *b, int w) {
  Warp *wp = &b->warps[w];
  if (wp->arrived == 0 || wp->arrived != wp->live)
    return;
  wp->arrived = 0;
  wp->seq++;
  int end = (w + 1) * 32 < b->nthreads ? (w + 1) * 32 : b->nthreads;
  for (int i = w * 32; i < end; i++)
    if (b->fibers[i].waiting == 2 && i != b->cur)
      make_ready(b, i);
  if (b->fibers[b->cur].waiting == 2)
    b->fibers[b->cur].waiting = 0;
}

__attribute__((noinline, unused)) void fiber_entry(Block *b) {
  b->fn(b->fn_ctx);
  Fiber *self = &b->fibers[b->cur];
  self->waiting = 3;
  b->live--;
  b->warps[b->cur / 32].live--;
  release_warp(b, b->cur / 32);
  release_block(b);
  yield_blocked(b);
}

#ifdef NGEN_EMU_UCONTEXT
void fiber_entry_uc(unsigned lo, unsigned hi) {
  fiber_entry(reinterpret_cast<Block *>((uintptr_t(hi) << 32) | lo));
}
#endif

/* Called by a thread at a block barrier; site tells barriers apart so that
 * threads waiting at different __syncthreads are reported, not released.
 * Returns how many threads passed a true pred (mode 0), or whether all
 * (mode 1) or any (mode 2) did. */
inline int block_barrier(const void *site, int pred, int mode) {
  Block *b = cur_block;
  if (!b) {
    if (solo_block)
      return pred != 0;
    simple_misuse = 1;
    return pred;
  }
  if (b->arrived == 0)
    b->site = site;
  else if (site != b->site)
    b->divergent = 1;
  b->arrived++;
  b->pred_count += pred != 0;
  b->fibers[b->cur].waiting = 1;
  release_block(b);
  if (b->fibers[b->cur].waiting)
    yield_blocked(b);
  if (mode == 1)
    return b->pred_result == b->pred_arrived;
  return mode == 2 ? b->pred_result > 0 : b->pred_result;
}

inline void warp_barrier(Block *b) {
  int w = b->cur / 32;
  b->warps[w].arrived++;
  b->fibers[b->cur].waiting = 2;
  release_warp(b, w);
  if (b->fibers[b->cur].waiting)
    yield_blocked(b);
}

/* Every lane publishes v, waits for the warp, then reads lane src (or keeps
 * its own value when src is -1 or beyond the block). Double buffering means
 * the next shuffle cannot overwrite a slot that a slower lane still reads. */
template <class T> inline T shuffle(T v, int src) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  Block *b = cur_block;
  if (!b) {
    simple_misuse |= !solo_block;
    return v;
  }
  int lane = b->cur % 32;
  Warp *wp = &b->warps[b->cur / 32];
  unsigned long long *buf = wp->xchg[wp->seq & 1];
  memcpy(&buf[lane], &v, sizeof(T));
  warp_barrier(b);
  int base = b->cur - lane;
  if (src < 0 || base + src >= b->nthreads)
    return v;
  T r;
  memcpy(&r, &buf[src], sizeof(T));
  return r;
}

inline unsigned lane_id() { return cur_block ? unsigned(cur_block->cur % 32) : 0; }

template <class F> void invoke(void *f) { (*static_cast<F *>(f))(); }

inline void set_grid(const ngen_launch *l) {
  blockDim = dim3(l->block[0], l->block[1], l->block[2]);
  gridDim = dim3(l->grid[0], l->grid[1], l->grid[2]);
}

inline void set_block(long long id) {
  blockIdx.x = unsigned(id % gridDim.x);
  blockIdx.y = unsigned(id / gridDim.x % gridDim.y);
  blockIdx.z = unsigned(id / (long long)gridDim.x / gridDim.y);
}

inline bool bad_shape(const ngen_launch *l) {
  long long n = (long long)l->block[0] * l->block[1] * l->block[2];
  return n <= 0 || n > kMaxThreads || l->grid[0] == 0 || l->grid[1] == 0 || l->grid[2] == 0 ||
         l->shared_bytes < 0;
}

inline bool set_shared(const ngen_launch *l) {
  if (l->shared_bytes == 0) {
    dyn_shared = nullptr;
    return true;
  }
  Pool *p = get_pool(l);
  if (!p || !p->reserve_shared(size_t(l->shared_bytes)))
    return false;
  dyn_shared = p->shared;
  return true;
}

/* begin_fiberless sets up a launch whose threads run without fibers
 * (run_simple, run_span); false means a bad launch. */
inline bool begin_fiberless(const ngen_launch *l) {
  if (bad_shape(l) || !set_shared(l))
    return false;
  set_grid(l);
  cur_block = nullptr;
  simple_misuse = 0;
  return true;
}

/* A plain loop over the threads: kernels without barriers need no fibers. */
template <class F> int run_simple(const ngen_launch *l, F &&f) {
  ngen_flush_denormals ftz;
  if (!begin_fiberless(l))
    return NGEN_ERR_LAUNCH;
  const unsigned bx = l->block[0], by = l->block[1], bz = l->block[2];
  for (long long id = l->block_begin; id < l->block_end; id++) {
    set_block(id);
    if (by == 1 && bz == 1) {
      threadIdx.y = threadIdx.z = 0;
      for (unsigned x = 0; x < bx; x++) {
        threadIdx.x = x;
        f();
      }
      continue;
    }
    for (unsigned z = 0; z < bz; z++)
      for (unsigned y = 0; y < by; y++)
        for (unsigned x = 0; x < bx; x++) {
          threadIdx = uint3{x, y, z};
          f();
        }
  }
  return simple_misuse ? NGEN_ERR_SYNC_IN_SIMPLE : NGEN_OK;
}

/* Grid-stride kernels (elementwise: every index independent of every other)
 * give the same result under any partition of their index range: on the GPU
 * the iterations already run in parallel, in no order. So the emulation runs
 * each worker's share of the grid as one call that walks a contiguous span
 * with unit stride, instead of one call per thread with stride
 * gridDim*blockDim. That removes the per-thread overhead and lets the host
 * compiler vectorise the body. NGEN_GRID_STRIDE (below) iterates
 * [span_lo(n), span_hi(n)). */
thread_local long long span_first, span_last, span_blocks; /* blocks [first, last) of span_blocks */

inline long long span_at(long long n, long long b) { return (long long)((__int128)n * b / span_blocks); }
inline long long span_lo(long long n) { return span_at(n, span_first); }
inline long long span_hi(long long n) { return span_at(n, span_last); }

template <class F> int run_span(const ngen_launch *l, F &&f) {
  ngen_flush_denormals ftz;
  if (!begin_fiberless(l))
    return NGEN_ERR_LAUNCH;
  span_blocks = (long long)gridDim.x * gridDim.y * gridDim.z;
  span_first = l->block_begin;
  span_last = l->block_end;
  set_block(l->block_begin);
  threadIdx = uint3{0, 0, 0};
  f();
  return simple_misuse ? NGEN_ERR_SYNC_IN_SIMPLE : NGEN_OK;
}

/* run_own_stack: see NGEN_RUN_OWN_STACK. */
template <class F> int run_own_stack(const ngen_launch *l, F &&f) {
  if ((long long)l->block[0] * l->block[1] * l->block[2] != 1)
    return NGEN_ERR_LAUNCH;
  solo_block = 1;
  const int status = run_simple(l, static_cast<F &&>(f));
  solo_block = 0;
  return status;
}

inline void init_fiber(Block *b, int i) {
  Fiber *f = &b->fibers[i];
  f->waiting = 0;
#ifdef NGEN_EMU_UCONTEXT
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stack;
  f->uc.uc_stack.ss_size = kStackBytes;
  f->uc.uc_link = nullptr;
  uintptr_t p = reinterpret_cast<uintptr_t>(b);
  makecontext(&f->uc, reinterpret_cast<void (*)()>(fiber_entry_uc), 2, unsigned(p),
              unsigned(p >> 32));
#else
  /* The frame switch_stack pops: r15 r14 r13 r12 rbx rbp, then fiber_start
   * as the address it jumps to, leaving the stack 16-byte aligned for the
   * call fiber_start makes. */
  /* Stack tops 64 KiB apart share cache sets; staggering them by a line
   * per fiber keeps a block's hot frames from evicting each other. */
  char *top = f->stack + kStackBytes - (i % 64) * 64;
  void **sp = reinterpret_cast<void **>(top - 72);
  sp[0] = sp[1] = nullptr;
  sp[2] = reinterpret_cast<void *>(fiber_entry);
  sp[3] = b;
  sp[4] = sp[5] = nullptr;
  sp[6] = reinterpret_cast<void *>(fiber_start);
  f->sp = sp;
#endif
}

/* Each thread of a block is a fiber on this OS thread's pooled stacks. */
template <class F> int run_sync(const ngen_launch *l, F &&f) {
  ngen_flush_denormals ftz;
  if (bad_shape(l))
    return NGEN_ERR_LAUNCH;
  Pool *p = get_pool(l);
  const unsigned bx = l->block[0], by = l->block[1];
  const int n = int(bx * by * l->block[2]);
  if (!p || !p->reserve(n) || !set_shared(l))
    return NGEN_ERR_LAUNCH;
  set_grid(l);
  simple_misuse = 0;
  Block b;
  b.fibers = p->fibers;
  b.warps = p->warps;
  b.queue = p->queue;
  b.nthreads = n;
  b.fn = invoke<F>;
  b.fn_ctx = &f;
  for (int i = 0; i < n; i++)
    p->fibers[i].tid = uint3{unsigned(i) % bx, unsigned(i) / bx % by, unsigned(i) / (bx * by)};
  int status = NGEN_OK;
  for (long long id = l->block_begin; id < l->block_end && status == NGEN_OK; id++) {
    set_block(id);
    b.live = n;
    b.status = NGEN_OK;
    b.arrived = b.divergent = b.pred_count = b.pred_result = b.pred_arrived = 0;
    b.site = nullptr;
    for (int w = 0; w * 32 < n; w++) {
      b.warps[w].live = n - w * 32 < 32 ? n - w * 32 : 32;
      b.warps[w].arrived = 0;
      b.warps[w].seq = 0;
      b.warps[w].reduced = 0; /* seq is 1 or more after a barrier */
    }
    b.qhead = 0;
    b.qlen = 0;
    for (int i = 0; i < n; i++) {
      init_fiber(&b, i);
      if (i > 0)
        b.queue[b.qlen++] = i;
    }
    cur_block = &b;
    b.cur = 0;
    threadIdx = b.fibers[0].tid;
#ifdef NGEN_EMU_UCONTEXT
    swapcontext(&b.main_uc, &b.fibers[0].uc);
#else
    switch_stack(&b.main_sp, b.fibers[0].sp);
#endif
    cur_block = nullptr;
    status = b.status;
  }
  return status;
}

/* A warp's butterfly reduction (codegen's ngen_warp_sum and ngen_warp_max)
 * in one warp barrier instead of five shuffles, each of which switches
 * every fiber of the warp: the lanes publish their values, and the first
 * lane to run after the barrier computes every lane's result with the GPU
 * form's steps (xor 16, 8, 4, 2, 1; a lane whose partner is beyond the
 * block combines with its own value, which a shuffle from there returns),
 * which the others read. The next reduction of the warp overwrites them
 * only after every lane has arrived at it, so after every lane has read. */
template <class T, class Op> inline T warp_butterfly(T v, Op op) {
  static_assert(sizeof(T) <= 8, "warp reduction of a type wider than 8 bytes");
  Block *b = cur_block;
  if (!b) {
    simple_misuse |= !solo_block;
    return v;
  }
  int lane = b->cur % 32, base = b->cur - lane;
  Warp *wp = &b->warps[b->cur / 32];
  unsigned long long *buf = wp->xchg[wp->seq & 1];
  memcpy(&buf[lane], &v, sizeof(T));
  warp_barrier(b);
  if (wp->reduced != wp->seq) {
    int n = b->nthreads - base < 32 ? b->nthreads - base : 32;
    T x[32], y[32];
    for (int l = 0; l < n; l++)
      memcpy(&x[l], &buf[l], sizeof(T));
    for (int o = 16; o > 0; o >>= 1) {
      for (int l = 0; l < n; l++)
        y[l] = op(x[l], x[(l ^ o) < n ? l ^ o : l]);
      memcpy(x, y, sizeof(T) * n);
    }
    for (int l = 0; l < n; l++)
      memcpy(&wp->result[l], &x[l], sizeof(T));
    wp->reduced = wp->seq;
  }
  T r;
  memcpy(&r, &wp->result[lane], sizeof(T));
  return r;
}

} // namespace ngen_emu

/* Under NGEN_EMU_GPU_FORMS the preamble's own butterflies run instead:
 * five __shfl_xor_sync, each a warp barrier (see the end of this file). */
#ifndef NGEN_EMU_GPU_FORMS
#define NGEN_HOST_WARP_REDUCE 1
template <typename T> inline T ngen_warp_sum(T v) {
  return ::ngen_emu::warp_butterfly(v, [](T a, T b) { return a + b; });
}
template <typename T> inline T ngen_warp_max(T v) {
  return ::ngen_emu::warp_butterfly(v, [](T a, T b) { return b > a ? b : a; });
}
#endif

/* ---- CUDA device API ------------------------------------------------ */

#define __syncthreads()                                                                  \
  do {                                                                                   \
    static const char ngen_sync_site = 0;                                                \
    ::ngen_emu::block_barrier(&ngen_sync_site, 0, 0);                                    \
  } while (0)
#define NGEN_SYNC_PRED_(p, mode)                                                         \
  ({                                                                                     \
    static const char ngen_sync_site = 0;                                                \
    ::ngen_emu::block_barrier(&ngen_sync_site, (p) != 0, mode);                          \
  })
#define __syncthreads_count(p) NGEN_SYNC_PRED_(p, 0)
#define __syncthreads_and(p) NGEN_SYNC_PRED_(p, 1)
#define __syncthreads_or(p) NGEN_SYNC_PRED_(p, 2)

inline void __syncwarp(unsigned = 0xffffffffu) {
  if (::ngen_emu::cur_block)
    ::ngen_emu::warp_barrier(::ngen_emu::cur_block);
  else
    ::ngen_emu::simple_misuse |= !::ngen_emu::solo_block;
}
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

template <class T> inline T __shfl_sync(unsigned, T v, int src, int width = warpSize) {
  int lane = int(::ngen_emu::lane_id()), base = lane & ~(width - 1);
  return ::ngen_emu::shuffle(v, base + (src & (width - 1)));
}
template <class T> inline T __shfl_down_sync(unsigned, T v, unsigned delta, int width = warpSize) {
  int lane = int(::ngen_emu::lane_id()), src = lane + int(delta);
  return ::ngen_emu::shuffle(v, (src & ~(width - 1)) == (lane & ~(width - 1)) ? src : -1);
}
template <class T> inline T __shfl_up_sync(unsigned, T v, unsigned delta, int width = warpSize) {
  int lane = int(::ngen_emu::lane_id()), src = lane - int(delta);
  return ::ngen_emu::shuffle(v, src >= (lane & ~(width - 1)) ? src : -1);
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int mask, int width = warpSize) {
  int lane = int(::ngen_emu::lane_id()), src = lane ^ mask;
  return ::ngen_emu::shuffle(v, src < ((lane & ~(width - 1)) + width) ? src : -1);
}

/* Atomics: blocks run on different OS threads. Relaxed order matches CUDA's
 * atomics, which order nothing without a fence. */
#define NGEN_RMW_(T, OP, BODY)                                                           \
  inline T OP(T *p, T v) {                                                               \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED), next;                                  \
    do {                                                                                 \
      next = BODY;                                                                       \
    } while (!__atomic_compare_exchange_n(p, &old, next, true, __ATOMIC_RELAXED,         \
                                          __ATOMIC_RELAXED));                            \
    return old;                                                                          \
  }
#define NGEN_RMW_FLOAT_(T, U, OP, BODY)                                                  \
  inline T OP(T *p, T v) {                                                               \
    U *q = reinterpret_cast<U *>(p);                                                     \
    U bits = __atomic_load_n(q, __ATOMIC_RELAXED), nbits;                                \
    T old;                                                                               \
    do {                                                                                 \
      memcpy(&old, &bits, sizeof(T));                                                    \
      T next = BODY;                                                                     \
      memcpy(&nbits, &next, sizeof(T));                                                  \
    } while (!__atomic_compare_exchange_n(q, &bits, nbits, true, __ATOMIC_RELAXED,       \
                                          __ATOMIC_RELAXED));                            \
    return old;                                                                          \
  }
NGEN_RMW_FLOAT_(float, uint32_t, atomicAdd, old + v)
NGEN_RMW_FLOAT_(double, uint64_t, atomicAdd, old + v)
NGEN_RMW_(int, atomicMax, old > v ? old : v)
NGEN_RMW_(int, atomicMin, old < v ? old : v)
NGEN_RMW_(unsigned, atomicMax, old > v ? old : v)
NGEN_RMW_(unsigned, atomicMin, old < v ? old : v)
#undef NGEN_RMW_
#undef NGEN_RMW_FLOAT_
inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline int atomicSub(int *p, int v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicSub(unsigned *p, unsigned v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
template <class T> inline T atomicCAS(T *p, T cmp, T v) {
  __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return cmp;
}
template <class T> inline T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_ACQ_REL); }
inline float atomicExch(float *p, float v) {
  uint32_t b, o;
  memcpy(&b, &v, 4);
  o = __atomic_exchange_n(reinterpret_cast<uint32_t *>(p), b, __ATOMIC_ACQ_REL);
  memcpy(&v, &o, 4);
  return v;
}

/* ---- math and intrinsics that <math.h> lacks ------------------------ */

/* C23 adds rsqrt/rsqrtf to <math.h>; macros keep a newer libc's
 * declarations from making these calls ambiguous. */
inline float ngen_rsqrtf(float x) { return 1.0f / ngen_sqrtf(x); }
inline double ngen_rsqrt(double x) { return 1.0 / sqrt(x); }
#define rsqrtf ngen_rsqrtf
#define sqrtf ngen_sqrtf
#define rsqrt ngen_rsqrt
/* glibc declares its own __expf etc.; renaming ours avoids ambiguous calls
 * there while still defining them on other C libraries. */
inline float ngen_expf(float x) { return expf(x); }
inline float ngen_logf(float x) { return logf(x); }
inline float ngen_powf(float x, float y) { return powf(x, y); }
inline float ngen_sinf(float x) { return sinf(x); }
inline float ngen_cosf(float x) { return cosf(x); }
inline float ngen_tanf(float x) { return tanf(x); }
#define __expf ngen_expf
#define __logf ngen_logf
#define __powf ngen_powf
#define __sinf ngen_sinf
#define __cosf ngen_cosf
#define __tanf ngen_tanf
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return ngen_sqrtf(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __int_as_float(int x) { float f; memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }
inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
inline int __float2int_rn(float x) { return int(nearbyintf(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((uint64_t(a) * b) >> 32); }
inline int __mulhi(int a, int b) { return int((int64_t(a) * b) >> 32); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T> inline T __ldg(const T *p) { return *p; }

#define NGEN_MINMAX_(T)                                                                  \
  inline T min(T a, T b) { return a < b ? a : b; }                                       \
  inline T max(T a, T b) { return a > b ? a : b; }
NGEN_MINMAX_(int)
NGEN_MINMAX_(unsigned)
NGEN_MINMAX_(long)
NGEN_MINMAX_(unsigned long)
NGEN_MINMAX_(long long)
NGEN_MINMAX_(unsigned long long)
#undef NGEN_MINMAX_
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
/* CUDA promotes mixed signed/unsigned min/max to unsigned. */
inline unsigned min(int a, unsigned b) { return min(unsigned(a), b); }
inline unsigned min(unsigned a, int b) { return min(a, unsigned(b)); }
inline unsigned max(int a, unsigned b) { return max(unsigned(a), b); }
inline unsigned max(unsigned a, int b) { return max(a, unsigned(b)); }

} // namespace

/* ---- dropout masks -------------------------------------------------- */

/* preamble.cuh's ngen_dropout, the same bits drawn 64 elements at a time.
 * The GPU form runs Philox per element, which cost 14 ns an element here
 * and kept the loop scalar. Here a block of 64 elements is 16 Philox
 * counters run side by side in SIMD lanes, kept as 64 mask bits in a
 * per-worker direct-mapped cache keyed by everything the bits depend on
 * (Philox's key words k0 and k1, from the seed and the step's high word,
 * the stream, the step's low word, and the keep probability). A kernel
 * draws each block once and pays a lookup per element; a backward kernel
 * finds the forward kernel's blocks still cached on the same worker while
 * they fit the 1024 slots (64K elements: the seed MLP's two dropouts take
 * 768). A slot's index mixes in the stream so that two dropout ops of one
 * shape use different slots. 40 KB a worker: every thread of a binary
 * carries each package's thread-local storage. Larger tensors (the gpt
 * model's [B,128,1024] activations) miss in the backward kernel too, so
 * drawing is most of dropout's cost there: on AVX2 hosts a miss draws
 * four consecutive blocks at once (keep_fill), which keeps Philox's
 * multiplies busy instead of waiting on each round's latency. */
namespace {
namespace ngen_emu {
struct KeepSlot {
  unsigned long long tag; /* block + 1; 0 is empty */
  unsigned long long key; /* k0 | k1 << 32; with ctr, the words k0 k1 stream step */
  unsigned long long ctr; /* stream | step lo << 32 */
  unsigned keep, pad;     /* keep: the probability's bits */
  uint64_t bits;          /* bit e: element block * 64 + e is kept */
};
constexpr int kKeepSlots = 1024;
thread_local KeepSlot keep_slots[kKeepSlots];

/* keep_bits64 is the mask of the 64 elements of counters ctr .. ctr+15
 * (bit 4l + j: word j of counter ctr + l), as preamble.cuh's ngen_keep. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) /* <immintrin.h> is included above */
#define NGEN_KEEP_SIMD 1
/* Mask bit 4l + j is word j of counter l; movmskps gives word j of four
 * counters, which keep_spread moves to bits 0, 4, 8, 12. */
constexpr unsigned short keep_spread[16] = {0x0000, 0x0001, 0x0010, 0x0011, 0x0100, 0x0101, 0x0110, 0x0111,
                                            0x1000, 0x1001, 0x1010, 0x1011, 0x1100, 0x1101, 0x1110, 0x1111};
/* lo and hi are the low and high words of a * m, lane by lane (x86 has no
 * 32-bit high multiply: pmuludq multiplies the even lanes). */
inline void keep_mul(__m128i a, __m128i m, __m128i &lo, __m128i &hi) {
  const __m128i pe = _mm_mul_epu32(a, m), po = _mm_mul_epu32(_mm_srli_epi64(a, 32), m);
  const __m128i t0 = _mm_unpacklo_epi32(pe, po), t1 = _mm_unpackhi_epi32(pe, po);
  lo = _mm_unpacklo_epi64(t0, t1);
  hi = _mm_unpackhi_epi64(t0, t1);
}
inline uint64_t keep_bits64_sse2(unsigned k0, unsigned k1, unsigned stream, unsigned step, unsigned long long ctr,
                                 float keep) {
  __m128i c0[4], c1[4], c2[4], c3[4];
  for (int v = 0; v < 4; ++v) {
    const unsigned long long b = ctr + 4 * v; /* ctr % 16 == 0: the low word does not wrap */
    c0[v] = _mm_add_epi32(_mm_set1_epi32((int)(unsigned)b), _mm_setr_epi32(0, 1, 2, 3));
    c1[v] = _mm_set1_epi32((int)(unsigned)(b >> 32));
    c2[v] = _mm_set1_epi32((int)stream);
    c3[v] = _mm_set1_epi32((int)step);
  }
  const __m128i m0 = _mm_set1_epi32((int)0xD2511F53u), m1 = _mm_set1_epi32((int)0xCD9E8D57u);
  for (int r = 0; r < 10; ++r) {
    const __m128i vk0 = _mm_set1_epi32((int)k0), vk1 = _mm_set1_epi32((int)k1);
    for (int v = 0; v < 4; ++v) {
      __m128i l0, h0, l1, h1;
      keep_mul(c0[v], m0, l0, h0);
      keep_mul(c2[v], m1, l1, h1);
      c0[v] = _mm_xor_si128(_mm_xor_si128(h1, c1[v]), vk0);
      c2[v] = _mm_xor_si128(_mm_xor_si128(h0, c3[v]), vk1);
      c1[v] = l1;
      c3[v] = l0;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  const __m128 scale = _mm_set1_ps(5.9604644775390625e-08f), vkeep = _mm_set1_ps(keep);
  uint64_t bits = 0;
  for (int v = 0; v < 4; ++v) {
    const __m128i w[4] = {c0[v], c1[v], c2[v], c3[v]};
    for (int j = 0; j < 4; ++j) {
      const __m128 u = _mm_mul_ps(_mm_cvtepi32_ps(_mm_srli_epi32(w[j], 8)), scale);
      bits |= (uint64_t)keep_spread[_mm_movemask_ps(_mm_cmplt_ps(u, vkeep))] << (16 * v + j);
    }
  }
  return bits;
}
/* The same with eight counters a vector, where the CPU has AVX2. */
__attribute__((target("avx2"))) inline void keep_mul8(__m256i a, __m256i m, __m256i &lo, __m256i &hi) {
  const __m256i pe = _mm256_mul_epu32(a, m), po = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  const __m256i t0 = _mm256_unpacklo_epi32(pe, po), t1 = _mm256_unpackhi_epi32(pe, po);
  lo = _mm256_unpacklo_epi64(t0, t1);
  hi = _mm256_unpackhi_epi64(t0, t1);
}
/* keep_bits_avx2 draws NB blocks at once, blocks ctr/16 .. ctr/16+NB-1
 * into out[0 .. NB-1]: 2 NB vectors of counters in flight. (Counters in
 * the low halves of 64-bit lanes, which needs no shuffles in the rounds,
 * measured slower on this project's AMD host.) */
template <int NB>
__attribute__((target("avx2"))) inline void keep_bits_avx2(unsigned k0, unsigned k1, unsigned stream, unsigned step,
                                                           unsigned long long ctr, float keep, uint64_t *out) {
  constexpr int NV = 2 * NB;
  __m256i c0[NV], c1[NV], c2[NV], c3[NV];
  for (int v = 0; v < NV; ++v) {
    const unsigned long long b = ctr + 8 * v; /* ctr % 8 == 0: the low word does not wrap within a vector */
    c0[v] = _mm256_add_epi32(_mm256_set1_epi32((int)(unsigned)b), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    c1[v] = _mm256_set1_epi32((int)(unsigned)(b >> 32));
    c2[v] = _mm256_set1_epi32((int)stream);
    c3[v] = _mm256_set1_epi32((int)step);
  }
  const __m256i m0 = _mm256_set1_epi32((int)0xD2511F53u), m1 = _mm256_set1_epi32((int)0xCD9E8D57u);
  for (int r = 0; r < 10; ++r) {
    const __m256i vk0 = _mm256_set1_epi32((int)k0), vk1 = _mm256_set1_epi32((int)k1);
    for (int v = 0; v < NV; ++v) {
      __m256i l0, h0, l1, h1;
      keep_mul8(c0[v], m0, l0, h0);
      keep_mul8(c2[v], m1, l1, h1);
      c0[v] = _mm256_xor_si256(_mm256_xor_si256(h1, c1[v]), vk0);
      c2[v] = _mm256_xor_si256(_mm256_xor_si256(h0, c3[v]), vk1);
      c1[v] = l1;
      c3[v] = l0;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  const __m256 scale = _mm256_set1_ps(5.9604644775390625e-08f), vkeep = _mm256_set1_ps(keep);
  for (int b = 0; b < NB; ++b) {
    uint64_t bits = 0;
    for (int h = 0; h < 2; ++h) {
      const int v = 2 * b + h;
      const __m256i w[4] = {c0[v], c1[v], c2[v], c3[v]};
      for (int j = 0; j < 4; ++j) {
        const __m256 u = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w[j], 8)), scale);
        const int m = _mm256_movemask_ps(_mm256_cmp_ps(u, vkeep, _CMP_LT_OQ));
        bits |= ((uint64_t)keep_spread[m & 15] | (uint64_t)keep_spread[m >> 4] << 16) << (32 * h + j);
      }
    }
    out[b] = bits;
  }
}
__attribute__((target("avx2"))) inline uint64_t keep_bits64_avx2(unsigned k0, unsigned k1, unsigned stream,
                                                                 unsigned step, unsigned long long ctr, float keep) {
  uint64_t bits;
  keep_bits_avx2<1>(k0, k1, stream, step, ctr, keep, &bits);
  return bits;
}
inline bool keep_avx2() {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
}
inline uint64_t keep_bits64(unsigned k0, unsigned k1, unsigned stream, unsigned step, unsigned long long ctr,
                            float keep) {
  return keep_avx2() ? keep_bits64_avx2(k0, k1, stream, step, ctr, keep) : keep_bits64_sse2(k0, k1, stream, step, ctr, keep);
}
#else
inline uint64_t keep_bits64(unsigned k0, unsigned k1, unsigned stream, unsigned step, unsigned long long ctr,
                            float keep) {
  uint64_t bits = 0;
  for (int l = 0; l < 16; ++l) {
    const unsigned long long b = ctr + l;
    unsigned c0 = (unsigned)b, c1 = (unsigned)(b >> 32), c2 = stream, c3 = step, q0 = k0, q1 = k1;
    for (int r = 0; r < 10; ++r) {
      const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
      const unsigned n0 = (unsigned)(p1 >> 32) ^ c1 ^ q0, n2 = (unsigned)(p0 >> 32) ^ c3 ^ q1;
      c0 = n0;
      c1 = (unsigned)p1;
      c2 = n2;
      c3 = (unsigned)p0;
      q0 += 0x9E3779B9u;
      q1 += 0xBB67AE85u;
    }
    const unsigned w[4] = {c0, c1, c2, c3};
    for (int j = 0; j < 4; ++j)
      bits |= (uint64_t)((float)(w[j] >> 8) * 5.9604644775390625e-08f < keep) << (4 * l + j);
  }
  return bits;
}
#endif

/* keep_fill draws block into its slot s. With AVX2 it draws the next
 * kKeepAhead - 1 blocks too, into theirs (distinct from s's and from each
 * other: consecutive blocks differ in the slot index's low bits), which
 * the same kernel asks for next. */
__forceinline__ KeepSlot &keep_slot(unsigned stream, unsigned long long block);
constexpr int kKeepAhead = 4;
__attribute__((noinline)) void keep_fill(KeepSlot &s, unsigned k0, unsigned k1, unsigned stream, unsigned step,
                                         float keep, unsigned long long block) {
  const unsigned long long key = k0 | (unsigned long long)k1 << 32, ctr = stream | (unsigned long long)step << 32;
  if (keep >= 1.0f) { /* every draw is below 1: ngen_dropout_if out of training */
    s = KeepSlot{block + 1, key, ctr, __float_as_uint(keep), 0, ~0ull};
    return;
  }
#ifdef NGEN_KEEP_SIMD
  if (keep_avx2()) {
    uint64_t bits[kKeepAhead];
    keep_bits_avx2<kKeepAhead>(k0, k1, stream, step, block * 16, keep, bits);
    for (int b = 1; b < kKeepAhead; ++b)
      keep_slot(stream, block + b) = KeepSlot{block + b + 1, key, ctr, __float_as_uint(keep), 0, bits[b]};
    s = KeepSlot{block + 1, key, ctr, __float_as_uint(keep), 0, bits[0]};
    return;
  }
#endif
  s = KeepSlot{block + 1, key, ctr, __float_as_uint(keep), 0, keep_bits64(k0, k1, stream, step, block * 16, keep)};
}

/* keep_slot is the cache slot of a block; keep_hit says whether it holds
 * the block's bits under this key. */
__forceinline__ KeepSlot &keep_slot(unsigned stream, unsigned long long block) {
  return keep_slots[(block ^ (stream * 0x9E3779B9ull)) & (kKeepSlots - 1)];
}
__forceinline__ bool keep_hit(const KeepSlot &s, unsigned k0, unsigned k1, unsigned stream, unsigned step,
                              unsigned keep, unsigned long long block) {
  return ((s.tag ^ (block + 1)) | (s.key ^ (k0 | (unsigned long long)k1 << 32)) |
          (s.ctr ^ (stream | (unsigned long long)step << 32)) | (s.keep ^ keep)) == 0;
}
/* keep_bits returns the mask bits of element idx's block of 64. */
__forceinline__ uint64_t keep_bits(unsigned k0, unsigned k1, unsigned stream, unsigned step, unsigned long long idx,
                                   float keep) {
  KeepSlot &s = keep_slot(stream, idx >> 6);
  if (__builtin_expect(!keep_hit(s, k0, k1, stream, step, __float_as_uint(keep), idx >> 6), 0))
    keep_fill(s, k0, k1, stream, step, keep, idx >> 6);
  return s.bits;
}
/* keep_miss is ngen_dropout_f_1 after a cache miss: out of line, so that
 * the hit path needs no stack frame. */
__attribute__((noinline)) float keep_miss(unsigned k0, unsigned k1, unsigned stream, unsigned step,
                                          unsigned long long idx, float keep, float scale) {
  return (keep_bits(k0, k1, stream, step, idx, keep) >> (idx & 63)) & 1 ? scale : 0.0f;
}
} // namespace ngen_emu
} // namespace

/* ngen_dropout_f is the factor of one element (scale or 0) from Philox's
 * key words and the element index's words. Declared with GCC's simd
 * attribute (as ngen_sqrtf above), so that a kernel loop calling it still
 * vectorises: the 4-lane SSE variant, for four consecutive elements of one
 * block (what a vectorised loop asks), makes one lookup, and draws lane by
 * lane otherwise. It is declared const: its result depends on its
 * arguments alone, and the cache it fills is invisible to the caller.
 * Builds with AVX or wider as their baseline would need the 8- and
 * 16-lane variants, so they call the scalar form instead. */
#if defined(NGEN_KEEP_SIMD) && !defined(__AVX__)
extern "C" __attribute__((simd("notinbranch"), const, nothrow)) float
ngen_dropout_f(unsigned k0, unsigned k1, unsigned stream, unsigned step, unsigned lo, unsigned hi, float keep, float scale);
#endif
extern "C" __attribute__((used)) inline float ngen_dropout_f_1(unsigned k0, unsigned k1, unsigned stream, unsigned step,
                                                               unsigned lo, unsigned hi, float keep, float scale) {
  const unsigned long long idx = lo | (unsigned long long)hi << 32;
  const ngen_emu::KeepSlot &s = ngen_emu::keep_slot(stream, idx >> 6);
  if (__builtin_expect(!ngen_emu::keep_hit(s, k0, k1, stream, step, __float_as_uint(keep), idx >> 6), 0))
    return ngen_emu::keep_miss(k0, k1, stream, step, idx, keep, scale);
  return (s.bits >> (idx & 63)) & 1 ? scale : 0.0f;
}
#if defined(NGEN_KEEP_SIMD) && !defined(__AVX__)
/* keep_regular says whether a vector call's lanes are four consecutive
 * elements with every other argument the same in all lanes (as a loop
 * passes them), and no lane's key word differs from kw = k0 k1 stream
 * step. */
inline bool keep_regular(__m128i kw, __m128i k0, __m128i k1, __m128i stream, __m128i step, __m128i lo, __m128i hi,
                         __m128 keep, __m128 scale) {
  const auto lane0 = [](__m128i v) { return _mm_shuffle_epi32(v, 0); };
  const __m128i d0 = _mm_or_si128(_mm_xor_si128(k0, lane0(kw)), _mm_xor_si128(k1, _mm_shuffle_epi32(kw, 0x55)));
  const __m128i d1 = _mm_or_si128(_mm_xor_si128(stream, _mm_shuffle_epi32(kw, 0xaa)), _mm_xor_si128(step, _mm_shuffle_epi32(kw, 0xff)));
  const __m128i k = _mm_castps_si128(keep), sc = _mm_castps_si128(scale);
  const __m128i d2 = _mm_or_si128(_mm_xor_si128(k, lane0(k)), _mm_xor_si128(sc, lane0(sc)));
  const __m128i d3 = _mm_or_si128(_mm_xor_si128(hi, lane0(hi)), _mm_xor_si128(lo, _mm_add_epi32(lane0(lo), _mm_setr_epi32(0, 1, 2, 3))));
  const __m128i d = _mm_or_si128(_mm_or_si128(d0, d1), _mm_or_si128(d2, d3));
  return _mm_movemask_epi8(_mm_cmpeq_epi32(d, _mm_setzero_si128())) == 0xffff;
}
/* keep_lanes4 turns four mask bits into lanes of scale or 0. */
inline __m128 keep_lanes4(unsigned nib, __m128 scale) {
  const __m128i bit = _mm_setr_epi32(1, 2, 4, 8);
  const __m128i on = _mm_cmpeq_epi32(_mm_and_si128(_mm_set1_epi32((int)nib), bit), bit);
  return _mm_and_ps(_mm_castsi128_ps(on), scale);
}
/* ngen_dropout_f_4 off its fast path: a block to draw, a block boundary,
 * or lanes that are not consecutive (one at a time). */
__attribute__((noinline)) inline __m128 ngen_dropout_f_slow(__m128i k0, __m128i k1, __m128i stream, __m128i step,
                                                            __m128i lo, __m128i hi, __m128 keep, __m128 scale) {
  const unsigned q0 = (unsigned)_mm_cvtsi128_si32(k0), q1 = (unsigned)_mm_cvtsi128_si32(k1);
  const unsigned st = (unsigned)_mm_cvtsi128_si32(stream), sp = (unsigned)_mm_cvtsi128_si32(step);
  const unsigned lo0 = (unsigned)_mm_cvtsi128_si32(lo);
  const __m128i kw = _mm_setr_epi32((int)q0, (int)q1, (int)st, (int)sp);
  if ((lo0 & 63) <= 60 && keep_regular(kw, k0, k1, stream, step, lo, hi, keep, scale)) {
    const unsigned long long idx = lo0 | (unsigned long long)(unsigned)_mm_cvtsi128_si32(hi) << 32;
    return keep_lanes4((unsigned)(ngen_emu::keep_bits(q0, q1, st, sp, idx, _mm_cvtss_f32(keep)) >> (idx & 63)) & 15u,
                       scale);
  }
  alignas(16) unsigned a[6][4];
  alignas(16) float f[2][4], out[4];
  const __m128i in[6] = {k0, k1, stream, step, lo, hi};
  for (int i = 0; i < 6; ++i)
    _mm_store_si128((__m128i *)a[i], in[i]);
  _mm_store_ps(f[0], keep);
  _mm_store_ps(f[1], scale);
  for (int l = 0; l < 4; ++l)
    out[l] = ngen_dropout_f_1(a[0][l], a[1][l], a[2][l], a[3][l], a[4][l], a[5][l], f[0][l], f[1][l]);
  return _mm_load_ps(out);
}
extern "C" __attribute__((used)) inline __m128 ngen_dropout_f_4(__m128i k0, __m128i k1, __m128i stream, __m128i step,
                                                                __m128i lo, __m128i hi, __m128 keep, __m128 scale) {
  /* The fast path: a cached block holds all four lanes, and the slot's
   * key words equal every lane's (keep_regular). */
  const unsigned lo0 = (unsigned)_mm_cvtsi128_si32(lo);
  const unsigned long long idx = lo0 | (unsigned long long)(unsigned)_mm_cvtsi128_si32(hi) << 32, block = idx >> 6;
  const ngen_emu::KeepSlot &s = ngen_emu::keep_slot((unsigned)_mm_cvtsi128_si32(stream), block);
  const __m128i kw = _mm_loadu_si128((const __m128i *)&s.key);
  if (__builtin_expect(s.tag != block + 1 || (lo0 & 63) > 60 ||
                           s.keep != (unsigned)_mm_cvtsi128_si32(_mm_castps_si128(keep)) ||
                           !keep_regular(kw, k0, k1, stream, step, lo, hi, keep, scale),
                       0))
    return ngen_dropout_f_slow(k0, k1, stream, step, lo, hi, keep, scale);
  return keep_lanes4((unsigned)(s.bits >> (lo0 & 63)) & 15u, scale);
}
/* The 8-lane AVX2 variant, which the launchers' AVX2 clones (NGEN_EMU_LAUNCHER
 * below) calls. Its masks are the 4-lane variant's bit for bit: both read
 * the same cached blocks, and off its fast path it makes two 4-lane
 * calls. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi" /* a note that 32-byte vector arguments' ABI changed in GCC 4.6 */
#define NGEN_LO(v) _mm256_castsi256_si128(v)
#define NGEN_HI(v) _mm256_extracti128_si256(v, 1)
/* ngen_dropout_f_8 off its fast path (lanes that straddle a block or are
 * not consecutive): two 4-lane calls. Out of line, so that the fast path
 * keeps no vector live across a call. */
__attribute__((noinline, target("avx2"))) inline __m256 ngen_dropout_f_8_slow(__m256i k0, __m256i k1, __m256i stream,
                                                                             __m256i step, __m256i lo, __m256i hi,
                                                                             __m256 keep, __m256 scale) {
  const __m128 a = ngen_dropout_f_4(NGEN_LO(k0), NGEN_LO(k1), NGEN_LO(stream), NGEN_LO(step), NGEN_LO(lo),
                                    NGEN_LO(hi), _mm256_castps256_ps128(keep), _mm256_castps256_ps128(scale));
  const __m128 b = ngen_dropout_f_4(NGEN_HI(k0), NGEN_HI(k1), NGEN_HI(stream), NGEN_HI(step), NGEN_HI(lo),
                                    NGEN_HI(hi), _mm256_extractf128_ps(keep, 1), _mm256_extractf128_ps(scale, 1));
  return _mm256_set_m128(b, a);
}
extern "C" __attribute__((used, target("avx2"))) inline __m256 ngen_dropout_f_8(__m256i k0, __m256i k1, __m256i stream,
                                                                               __m256i step, __m256i lo, __m256i hi,
                                                                               __m256 keep, __m256 scale) {
  /* The fast path: the lanes are eight consecutive elements of one block,
   * every other word the same in all of them (as a loop passes them).
   * Lane 0's words are read out and the lanes checked against them first,
   * so that no vector is live across the cache lookup: under -fPIC (cgo)
   * the thread-local cache's address is a call to __tls_get_addr, which
   * the linker relaxes but g++ still spills every vector register for. */
#define NGEN_B0(v) _mm256_broadcastd_epi32(NGEN_LO(v))
#define NGEN_DIFF(v) _mm256_xor_si256((v), NGEN_B0(v))
  const unsigned q0 = (unsigned)_mm_cvtsi128_si32(NGEN_LO(k0)), q1 = (unsigned)_mm_cvtsi128_si32(NGEN_LO(k1));
  const unsigned st = (unsigned)_mm_cvtsi128_si32(NGEN_LO(stream)), sp = (unsigned)_mm_cvtsi128_si32(NGEN_LO(step));
  const unsigned lo0 = (unsigned)_mm_cvtsi128_si32(NGEN_LO(lo)), hi0 = (unsigned)_mm_cvtsi128_si32(NGEN_LO(hi));
  const float kp = _mm256_cvtss_f32(keep);
  const int sc = _mm_cvtsi128_si32(_mm256_castsi256_si128(_mm256_castps_si256(scale))); /* in a general register */
  const __m256i fk = _mm256_castps_si256(keep), fs = _mm256_castps_si256(scale);
  const __m256i d0 = _mm256_or_si256(NGEN_DIFF(k0), NGEN_DIFF(k1));
  const __m256i d1 = _mm256_or_si256(NGEN_DIFF(stream), NGEN_DIFF(step));
  const __m256i d2 = _mm256_or_si256(NGEN_DIFF(fk), NGEN_DIFF(fs));
  const __m256i d3 = _mm256_or_si256(_mm256_xor_si256(lo, _mm256_add_epi32(NGEN_B0(lo), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))),
                                     NGEN_DIFF(hi));
#undef NGEN_DIFF
#undef NGEN_B0
  const __m256i d = _mm256_or_si256(_mm256_or_si256(d0, d1), _mm256_or_si256(d2, d3));
  if (__builtin_expect(_mm256_testz_si256(d, d) && (lo0 & 63) <= 56, 1)) {
    const uint64_t bits = ngen_emu::keep_bits(q0, q1, st, sp, lo0 | (unsigned long long)hi0 << 32, kp);
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i on = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)(unsigned)(bits >> (lo0 & 63))), bit), bit);
    return _mm256_castsi256_ps(_mm256_and_si256(on, _mm256_set1_epi32(sc)));
  }
  return ngen_dropout_f_8_slow(k0, k1, stream, step, lo, hi, keep, scale);
}
#undef NGEN_LO
#undef NGEN_HI
#pragma GCC diagnostic pop
__asm__(".weak ngen_dropout_f\n.set ngen_dropout_f, ngen_dropout_f_1\n"
        ".weak _ZGVbN4vvvvvvvv_ngen_dropout_f\n.set _ZGVbN4vvvvvvvv_ngen_dropout_f, ngen_dropout_f_4\n"
        ".weak _ZGVdN8vvvvvvvv_ngen_dropout_f\n.set _ZGVdN8vvvvvvvv_ngen_dropout_f, ngen_dropout_f_8\n");
#else
inline float ngen_dropout_f(unsigned k0, unsigned k1, unsigned stream, unsigned step, unsigned lo, unsigned hi,
                            float keep, float scale) {
  return ngen_dropout_f_1(k0, k1, stream, step, lo, hi, keep, scale);
}
#endif

/* preamble.cuh's ngen_dropout. */
#define NGEN_HOST_DROPOUT 1
namespace {
__forceinline__ float ngen_dropout(unsigned long long seed, unsigned long long step, unsigned stream, long long idx,
                                   float keep, float scale) {
  return ngen_dropout_f((unsigned)seed, (unsigned)(seed >> 32) ^ (unsigned)(step >> 32), stream, (unsigned)step,
                        (unsigned)idx, (unsigned)((unsigned long long)idx >> 32), keep, scale);
}
/* preamble.cuh's ngen_dropout_if without its branch, which would keep the
 * kernel loop scalar (g++ does not vectorise a loop with a conditional
 * call): out of training mode it draws with keep 1, which keeps every
 * element (a draw is below 1), and scale 1, so the factor is exactly 1.
 * keep_fill fills such blocks without running Philox. */
__forceinline__ float ngen_dropout_if(int train, unsigned long long seed, unsigned long long step, unsigned stream,
                                      long long idx, float keep, float scale) {
  return ngen_dropout(seed, step, stream, idx, train ? keep : 1.0f, train ? scale : 1.0f);
}
} // namespace

/* ---- launch --------------------------------------------------------- */

/* NGEN_EMU_LAUNCHER marks each kernel's launcher in the host glue
 * (codegen.HostGlue). The kernels are compiled for baseline x86-64 (SSE2:
 * 4 float lanes), so that a package runs on any x86-64 host.
 * target_clones adds an AVX2 copy of every launcher, chosen once at load
 * time (an ifunc) on hosts that have AVX2: 8 lanes for every loop the
 * compiler vectorises, notably Adam's sqrt and divide. flatten inlines
 * the launcher's runner and its kernel's forms into each copy, so they are
 * compiled for its ISA (a runner left out of line stays SSE2). One clone
 * per kernel keeps the host compile linear in the number of kernels: a
 * single flattened entry over every kernel made g++ optimise one giant
 * function twice. The clone is AVX2 without FMA on purpose: g++ contracts
 * a*b+c in C++ whenever FMA is available, and results must stay
 * bit-identical to the SSE2 copy. Fiber bodies (NGEN_RUN_SYNC's invoke,
 * reached through a pointer) stay SSE2. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__AVX2__) && \
    defined(NGEN_KEEP_SIMD) && !defined(NGEN_EMU_NO_CLONES)
#define NGEN_EMU_LAUNCHER __attribute__((target_clones("avx2", "default"), flatten, noinline))
#else
#define NGEN_EMU_LAUNCHER __attribute__((noinline))
#endif
/* The launcher of the forms only the test modes run (a kernel's CUDA form
 * where it has a host form of its own, and its baseline form): compiled
 * once, for baseline x86-64, and kept out of NGEN_EMU_LAUNCHER's
 * flattened copies. */
#define NGEN_EMU_TEST_FORMS __attribute__((noinline))

/* The kernel call sits inside a lambda so that each kernel instantiates its
 * own runner, with the kernel inlined into the thread loop. */
#define NGEN_RUN_SIMPLE(l, call) return ::ngen_emu::run_simple((l), [&]() { call; })
#ifndef NGEN_EMU_GPU_FORMS
/* The CPU form of preamble.cuh's NGEN_GRID_STRIDE: the worker's span, with
 * unit stride. ivdep states what the GPU form already relies on, that no
 * iteration depends on another, so g++ vectorises without alias checks
 * (an optimizer update reads and writes the same buffers in place). */
#define NGEN_GRID_STRIDE(i, n)                                                           \
  _Pragma("GCC ivdep") for (long long i = ::ngen_emu::span_lo(n), i##_end = ::ngen_emu::span_hi(n); \
                            i < i##_end; ++i)
/* The CPU form of NGEN_GRID_STRIDE_ROWS: the worker's span of rows, each
 * an inner loop over its columns. */
#define NGEN_GRID_STRIDE_ROWS(r, j, rows, w)                                                          \
  for (long long r = ::ngen_emu::span_lo(rows), r##_end = ::ngen_emu::span_hi(rows); r < r##_end; ++r) \
  _Pragma("GCC ivdep") for (int j = 0; j < (int)(w); ++j)
#define NGEN_RUN_SPAN(l, call) return ::ngen_emu::run_span((l), [&]() { call; })
#else
/* GPU forms (runtime/cpu's Options.GPUForms): the preamble's grid-stride
 * loops and warp butterflies are compiled as the GPU runs them, so every
 * thread of the launch runs, one after another or as fibers, and a span
 * kernel is one more plain kernel. This is a test mode: the GPU's loop
 * bounds, strides and shuffles execute, at the cost of speed. */
#define NGEN_RUN_SPAN(l, call) return ::ngen_emu::run_simple((l), [&]() { call; })
#endif
#define NGEN_RUN_SYNC(l, call) return ::ngen_emu::run_sync((l), [&]() { call; })
/* A host form that runs with one-thread blocks on the worker's own stack
 * (runtime.RunOwnStack): without fibers, as a plain call per block. The
 * recurrences' and attention's host forms call the GEMM library, which
 * wants more stack than a fiber's 64 KiB. A launch with larger blocks is
 * an error: those run the CUDA form. */
#define NGEN_RUN_OWN_STACK(l, call) return ::ngen_emu::run_own_stack((l), [&]() { call; })

/* ---- recurrences: a GEMM per time step, a vectorisable cell ---------- */

/* The recurrences' CPU form (compiler/ops/recur_fast.go) runs each time
 * step as one GEMM over the block's sequences, [sequences, H] × [H, G·H],
 * then one pass of the cell over every unit of every sequence. The GEMM is
 * the host's GEMM library, the one runtime/cpu's Gemm calls (oneDNN's
 * sgemm for f32, OpenBLAS's cblas_dgemm for f64), found in the process by
 * name; a plain loop stands in where it is missing. */
#include <dlfcn.h>
namespace {
namespace ngen_emu {

struct gemm_lib {
  int (*s)(char, char, long long, long long, long long, float, const float *, long long, const float *,
           long long, float, float *, long long);
  void (*d)(int, int, int, int, int, int, double, const double *, int, const double *, int, double,
            double *, int);
  int (*omp_max)();
  void (*omp_set)(int);
};

inline const gemm_lib &gemm_syms() {
  static const gemm_lib lib = {
      reinterpret_cast<decltype(gemm_lib::s)>(dlsym(RTLD_DEFAULT, "dnnl_sgemm")),
      reinterpret_cast<decltype(gemm_lib::d)>(dlsym(RTLD_DEFAULT, "cblas_dgemm")),
      reinterpret_cast<decltype(gemm_lib::omp_max)>(dlsym(RTLD_DEFAULT, "omp_get_max_threads")),
      reinterpret_cast<decltype(gemm_lib::omp_set)>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))};
  return lib;
}

/* C = alpha·op(A)·op(B) + beta·C, row-major; beta 0 ignores C. */
template <class T>
inline void gemm_loop(bool ta, bool tb, long long m, long long n, long long k, T alpha, const T *a,
                      long long lda, const T *b, long long ldb, T beta, T *c, long long ldc) {
  for (long long i = 0; i < m; i++)
    for (long long j = 0; j < n; j++) {
      T s = 0;
      for (long long p = 0; p < k; p++)
        s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = alpha * s + (beta == 0 ? T(0) : beta * c[i * ldc + j]);
    }
}

inline void gemm(bool ta, bool tb, long long m, long long n, long long k, float alpha, const float *a,
                 long long lda, const float *b, long long ldb, float beta, float *c, long long ldc) {
  const gemm_lib &lib = gemm_syms();
  if (!lib.s)
    return gemm_loop(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  /* One thread: the device spreads work over its own threads (as
   * runtime/cpu's ngen_sgemm does). */
  if (lib.omp_max && lib.omp_set && lib.omp_max() != 1)
    lib.omp_set(1);
  lib.s(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void gemm(bool ta, bool tb, long long m, long long n, long long k, double alpha, const double *a,
                 long long lda, const double *b, long long ldb, double beta, double *c, long long ldc) {
  const gemm_lib &lib = gemm_syms();
  if (!lib.d)
    return gemm_loop(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  lib.d(101 /* row major */, ta ? 112 : 111, tb ? 112 : 111, int(m), int(n), int(k), alpha, a, int(lda), b,
        int(ldb), beta, c, int(ldc));
}

/* scan_scratch returns slot's per-thread buffer of at least n elements
 * (kept between launches; its contents are not preserved on growth). */
template <class T> inline T *scan_scratch(int slot, long long n) {
  static thread_local void *buf[4];
  static thread_local long long cap[4];
  const long long bytes = (n * (long long)sizeof(T) + 63) / 64 * 64;
  if (cap[slot] < bytes) {
    free(buf[slot]);
    buf[slot] = aligned_alloc(64, size_t(bytes));
    cap[slot] = buf[slot] ? bytes : 0;
    if (!buf[slot])
      abort();
  }
  return static_cast<T *>(buf[slot]);
}

/* exp, the logistic function and tanh in plain arithmetic that g++
 * vectorises (the C library's expf/tanhf keep a loop scalar, see
 * ngen_sqrtf), for the f32 cells. exp is Cephes' expf (a degree-5
 * polynomial on [-ln2/2, ln2/2] times 2^n; within 2 ulp), its argument
 * clamped to [-87, 87], so that 2^n stays a normal number. tanh is
 * Cephes' tanhf: an odd polynomial below 0.625, (1 - e)/(1 + e) with
 * e = exp(-2|x|) above (no cancellation there, since e < 0.29). */
inline float fast_expf(float x) {
  /* One select, through fabs and copysign: g++ turns two clamps into
   * branches, which stop the loop's vectorisation. */
  x = __builtin_fabsf(x) > 87.0f ? __builtin_copysignf(87.0f, x) : x;
  const float fn = x * 1.44269504088896341f;
  const int n = int(fn + __builtin_copysignf(0.5f, fn));
  const float nf = float(n);
  float r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int bits = (n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float fast_sigmoidf(float x) { return 1.0f / (1.0f + fast_expf(-x)); }

inline float fast_tanhf(float x) {
  const float a = __builtin_fabsf(x);
  const float e = fast_expf(-2.0f * a);
  const float big = (1.0f - e) / (1.0f + e);
  const float z = x * x;
  const float small =
      ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
       3.33332819422e-1f) * z * a + a;
  /* The select as bit operations: g++ would compute small and big in
   * branches (a loop with branches does not vectorise). */
  const int m = -int(a < 0.625f);
  int sb, bb;
  memcpy(&sb, &small, sizeof sb);
  memcpy(&bb, &big, sizeof bb);
  const int tb = (sb & m) | (bb & ~m);
  float t;
  memcpy(&t, &tb, sizeof t);
  return __builtin_copysignf(t, x);
}

/* scan_fma says whether the host has AVX2 and FMA, for the form's copy
 * compiled for them. */
inline bool scan_fma() {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

} // namespace ngen_emu
} // namespace

/* ---- GELU ----------------------------------------------------------- */

/* preamble.cuh's f32 ngen_gelu and ngen_gelu_grad (which it leaves out
 * when NGEN_HOST_GELU_F32 is defined), with an erf and exp in plain
 * arithmetic: the C library's erff and expf kept the GELU kernels' loops
 * scalar (about 12 ns an element). fast_erff is N. Juffa's branch-free
 * erff: an odd polynomial below 0.9277, 1 - exp(-t - poly(t)) above,
 * both computed and one selected; with fast_expf it stays within 1 ulp of
 * glibc's erff over [-10, 10]. The GPU keeps CUDA's erff and expf. */
namespace {
namespace ngen_emu {
inline float fast_erff(float a) {
  const float t = __builtin_fabsf(a), s = a * a;
  float r = -1.72853470e-5f * t + 3.83197126e-4f;
  const float u = -3.88396438e-3f * t + 2.42546219e-2f;
  r = r * s + u;
  r = r * t + -1.06777877e-1f;
  r = r * t + -6.34846687e-1f;
  r = r * t + -1.28717512e-1f;
  r = r * t - t;
  const float big = __builtin_copysignf(1.0f - fast_expf(r), a);
  float q = -5.96761703e-4f;
  q = q * s + 4.99119423e-3f;
  q = q * s + -2.67681349e-2f;
  q = q * s + 1.12819925e-1f;
  q = q * s + -3.76125336e-1f;
  q = q * s + 1.28379166e-1f;
  q = q * a + a;
  /* The select as bit operations (as fast_tanhf): with a ?: here, g++ 12
   * left every GELU loop scalar ("control flow in loop": big's arithmetic
   * ends up in a branch), about 9 ns an element instead of 1.7. */
  const int m = -int(t > 0.927734375f);
  int bb, qb;
  memcpy(&bb, &big, sizeof bb);
  memcpy(&qb, &q, sizeof qb);
  const int rb = (bb & m) | (qb & ~m);
  float r2;
  memcpy(&r2, &rb, sizeof r2);
  return r2;
}
} // namespace ngen_emu
inline float ngen_gelu(float x) { return 0.5f * x * (1.0f + ::ngen_emu::fast_erff(x * 0.70710678118654752f)); }
inline float ngen_gelu_grad(float x) {
  return 0.5f * (1.0f + ::ngen_emu::fast_erff(x * 0.70710678118654752f)) +
         x * 0.39894228040143268f * ::ngen_emu::fast_expf(-0.5f * x * x);
}
} // namespace
#define NGEN_HOST_GELU_F32 1

/* preamble.cuh's ngen_arrive (a two-phase reduction's arrival count):
 * the emulation's blocks run on host threads, so an acquire-release
 * fetch-add stands in for __threadfence and atomicAdd. */
namespace {
inline unsigned ngen_arrive(unsigned *count) { return __atomic_fetch_add(count, 1u, __ATOMIC_ACQ_REL); }
} // namespace
#define NGEN_HOST_ARRIVE 1

/* ---- ReLU's gradient ------------------------------------------------ */

/* ngen_emu::mask0 is x where keep holds, else +0, as a bit mask rather
 * than a select: with a ?: g++ sinks whatever computes x alone into the
 * branch, and where that is a dropout draw (dropout_relu_bwd) or an exp
 * (the attention's CPU form, compiler/ops/attention_fast.go) the loop
 * stays scalar ("control flow in loop"). Same bits as keep ? x : +0. */
namespace {
namespace ngen_emu {
inline float mask0(bool keep, float x) { return __int_as_float(__float_as_int(x) & -int(keep)); }
inline double mask0(bool keep, double x) { return __longlong_as_double(__double_as_longlong(x) & -(long long)keep); }
} // namespace ngen_emu
/* preamble.cuh's ngen_relu: +0 where x <= 0, else x (NaN too). With
 * the ?: a 16-bit kernel that stores the result (the f16 MLP's
 * add_relu_dropout_fwd) had g++ thread the +0 into the conversions after
 * it, and the loop stayed scalar with a branch on each element's sign:
 * 37 ns an element; 3 ns with the mask. */
inline float ngen_relu(float x) { return ::ngen_emu::mask0(!(x <= 0.0f), x); }
inline double ngen_relu(double x) { return ::ngen_emu::mask0(!(x <= 0.0), x); }
template <typename T> inline T ngen_relu(T x) { return x <= T(0) ? T(0) : x; }
/* preamble.cuh's ngen_relu_grad: g where y > 0, else +0. */
inline float ngen_relu_grad(float y, float g) { return ::ngen_emu::mask0(y > 0.0f, g); }
inline double ngen_relu_grad(double y, double g) { return ::ngen_emu::mask0(y > 0.0, g); }
} // namespace
#define NGEN_HOST_RELU_GRAD 1
#define NGEN_HOST_RELU 1
#endif /* __cplusplus */
#endif /* NGEN_EMU_H */
