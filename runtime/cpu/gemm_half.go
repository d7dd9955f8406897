package cpu

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <dnnl.h>
#include <omp.h>
#include <immintrin.h>

// ngen_bf16_engine is oneDNN's CPU engine for the bfloat16 products,
// created once; ngen_bf16_stream is a stream per calling thread (the
// device's launch thread and its GEMM workers), kept for the thread's life.
static dnnl_engine_t ngen_bf16_engine;
static pthread_once_t ngen_bf16_once = PTHREAD_ONCE_INIT;
static __thread dnnl_stream_t ngen_bf16_stream;
static void ngen_bf16_engine_init(void) {
	if (dnnl_engine_create(&ngen_bf16_engine, dnnl_cpu, 0) != dnnl_success)
		ngen_bf16_engine = NULL;
}

// ngen_bf16_native says whether a matmul primitive descriptor runs on
// the CPU's own bfloat16 dot products (AVX512-BF16 or AMX: oneDNN names
// its implementation brg:avx512_core_bf16, brg:avx512_core_amx, ...).
// Elsewhere oneDNN would emulate them (gemm:jit on plain AVX-512 took 2x
// the widen-sgemm-narrow path on the MLP's fc1) or refuse.
static int ngen_bf16_native(const_dnnl_primitive_desc_t pd) {
	const char *impl = NULL;
	if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) != dnnl_success || !impl)
		return 0;
	return strstr(impl, "ref") == NULL && (strstr(impl, "bf16") != NULL || strstr(impl, "amx") != NULL);
}

// ngen_bf16_matmul runs batch products C_i = alpha*op(A_i)*op(B_i) +
// beta*C_i of bfloat16 matrices (row-major, leading dimensions lda, ldb,
// ldc, entry strides sa, sb, sc in elements; a stride of 0 shares the
// matrix between entries) with oneDNN's matmul primitive on the calling
// thread: products accumulated in f32, alpha and beta applied in f32, C
// rounded to bfloat16 once (or, with cf32, C f32 and not rounded). It
// returns 0 when done, 1 when oneDNN has no
// native bfloat16 implementation for it (nothing was written: the caller
// widens to f32 instead) and -1 when a call failed after the descriptor
// was made.
static int ngen_bf16_matmul(int ta, int tb, long long batch, long long m, long long n, long long k,
                            float alpha, uintptr_t a, long long lda, long long sa,
                            uintptr_t b, long long ldb, long long sb,
                            float beta, uintptr_t c, long long ldc, long long sc, int cf32) {
	pthread_once(&ngen_bf16_once, ngen_bf16_engine_init);
	if (!ngen_bf16_engine)
		return 1;
	if (!ngen_bf16_stream &&
	    dnnl_stream_create(&ngen_bf16_stream, ngen_bf16_engine, dnnl_stream_default_flags) != dnnl_success) {
		ngen_bf16_stream = NULL;
		return 1;
	}
	if (omp_get_max_threads() != 1)
		omp_set_num_threads(1);
	dnnl_dims_t da = {sa ? batch : 1, m, k}, db = {sb ? batch : 1, k, n}, dc = {batch, m, n};
	// A batch dimension of 1 (a shared matrix, or one entry) takes the
	// matrix's extent as its stride.
	dnnl_dims_t xa = {sa ? sa : (ta ? k : m) * lda, ta ? 1 : lda, ta ? lda : 1};
	dnnl_dims_t xb = {sb ? sb : (tb ? n : k) * ldb, tb ? 1 : ldb, tb ? ldb : 1};
	dnnl_dims_t xc = {batch > 1 ? sc : m * ldc, ldc, 1};
	dnnl_memory_desc_t ma, mb, mc;
	if (dnnl_memory_desc_init_by_strides(&ma, 3, da, dnnl_bf16, xa) != dnnl_success ||
	    dnnl_memory_desc_init_by_strides(&mb, 3, db, dnnl_bf16, xb) != dnnl_success ||
	    dnnl_memory_desc_init_by_strides(&mc, 3, dc, cf32 ? dnnl_f32 : dnnl_bf16, xc) != dnnl_success)
		return 1;
	dnnl_matmul_desc_t md;
	if (dnnl_matmul_desc_init(&md, &ma, &mb, NULL, &mc) != dnnl_success)
		return 1;
	dnnl_primitive_attr_t attr = NULL;
	dnnl_post_ops_t po = NULL;
	int ok = dnnl_primitive_attr_create(&attr) == dnnl_success;
	if (ok && alpha != 1.0f)
		ok = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &alpha) == dnnl_success;
	if (ok && beta != 0.0f) {
		ok = dnnl_post_ops_create(&po) == dnnl_success && dnnl_post_ops_append_sum(po, beta) == dnnl_success &&
		     dnnl_primitive_attr_set_post_ops(attr, po) == dnnl_success;
	}
	dnnl_primitive_desc_t pd = NULL;
	if (ok && dnnl_primitive_desc_create(&pd, &md, attr, ngen_bf16_engine, NULL) != dnnl_success)
		pd = NULL;
	if (po)
		dnnl_post_ops_destroy(po);
	if (attr)
		dnnl_primitive_attr_destroy(attr);
	if (!pd)
		return 1;
	if (!ngen_bf16_native(pd)) {
		dnnl_primitive_desc_destroy(pd);
		return 1;
	}
	// The library's primitive cache makes a second descriptor of the
	// same shape about 1.5 µs.
	dnnl_primitive_t p = NULL;
	dnnl_memory_t mem[3] = {NULL, NULL, NULL};
	int rc = -1;
	if (dnnl_primitive_create(&p, pd) == dnnl_success &&
	    dnnl_memory_create(&mem[0], &ma, ngen_bf16_engine, (void *)a) == dnnl_success &&
	    dnnl_memory_create(&mem[1], &mb, ngen_bf16_engine, (void *)b) == dnnl_success &&
	    dnnl_memory_create(&mem[2], &mc, ngen_bf16_engine, (void *)c) == dnnl_success) {
		dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
		if (dnnl_primitive_execute(p, ngen_bf16_stream, 3, args) == dnnl_success &&
		    dnnl_stream_wait(ngen_bf16_stream) == dnnl_success)
			rc = 0;
	}
	for (int i = 0; i < 3; i++)
		if (mem[i])
			dnnl_memory_destroy(mem[i]);
	if (p)
		dnnl_primitive_destroy(p);
	dnnl_primitive_desc_destroy(pd);
	return rc;
}

// ngen_bf16_widen copies the rows×cols matrix of bfloat16 at src (leading
// dimension ld) into the packed f32 matrix dst: exact.
//
// Both loops are branch-free and built at -O3 with an AVX2 clone
// (NGEN_HALF_LOOP), so the compiler vectorises them: they are the whole
// cost of a bfloat16 product beyond f32's where oneDNN has no native
// bfloat16 matmul (a CPU without AVX512-BF16 or AMX).
#define NGEN_HALF_LOOP __attribute__((optimize("O3"), target_clones("avx2", "default")))
NGEN_HALF_LOOP static void ngen_bf16_widen(float *dst, uintptr_t src, int rows, int cols, int ld) {
	const uint16_t *s = (const uint16_t *)src;
	uint32_t *d = (uint32_t *)dst;
	for (long long r = 0; r < rows; r++)
		for (long long j = 0; j < cols; j++)
			d[r * cols + j] = (uint32_t)s[r * ld + j] << 16;
}
// ngen_bf16_narrow rounds the packed f32 matrix src into the bfloat16
// matrix dst (leading dimension ld) as __float2bfloat16_rn does: to
// nearest, ties to even, every NaN to 0x7fff (runtime/cpu/emu/ngen_half.h).
NGEN_HALF_LOOP static void ngen_bf16_narrow(uintptr_t dst, const float *src, int rows, int cols, int ld) {
	uint16_t *d = (uint16_t *)dst;
	const uint32_t *s = (const uint32_t *)src;
	for (long long r = 0; r < rows; r++)
		for (long long j = 0; j < cols; j++) {
			const uint32_t u = s[r * cols + j];
			const uint32_t b = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
			d[r * ld + j] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? 0x7fffu : b);
		}
}
// ngen_f16_widen copies the rows×cols matrix of IEEE binary16 at src
// (leading dimension ld) into the packed f32 matrix dst: exact, the bits
// of ngen_half.h's h2f, computed integer-only and branch-free (the
// exponent rebased, infinity and NaN rebased again, a subnormal
// normalised by shifts of 8, 4, 2 and 1), which vectorises here where
// h2f's float-adder form does not (TestGemmF16Conversions checks every
// pattern).
NGEN_HALF_LOOP static void ngen_f16_widen(float *dst, uintptr_t src, int rows, int cols, int ld) {
	const uint16_t *s = (const uint16_t *)src;
	uint32_t *d = (uint32_t *)dst;
	for (long long r = 0; r < rows; r++)
		for (long long j = 0; j < cols; j++) {
			const uint32_t h = s[r * ld + j];
			const uint32_t e = h & 0x7c00u, m = h & 0x3ffu;
			const uint32_t o = ((h & 0x7fffu) << 13) + (112u << 23);
			uint32_t mm = m, sh = 0, k;
			k = (mm & 0x7f8u) == 0 ? 8u : 0u; mm <<= k; sh += k;
			k = (mm & 0x780u) == 0 ? 4u : 0u; mm <<= k; sh += k;
			k = (mm & 0x600u) == 0 ? 2u : 0u; mm <<= k; sh += k;
			k = (mm & 0x400u) == 0 ? 1u : 0u; mm <<= k; sh += k;
			const uint32_t sub = m == 0 ? 0u : ((113u - sh) << 23) | ((mm & 0x3ffu) << 13);
			d[r * cols + j] = (e == 0x7c00u ? o + (112u << 23) : (e == 0 ? sub : o)) | ((h & 0x8000u) << 16);
		}
}
// ngen_f16_narrow rounds the packed f32 matrix src into the binary16
// matrix dst (leading dimension ld) as __float2half_rn does: to nearest,
// ties to even, overflow to ±inf, every NaN to 0x7fff: ngen_half.h's f2h,
// computed integer-only and branch-free (normal halves by a rounding bias
// on the bits, subnormal ones by a shift with the remainder rounded).
NGEN_HALF_LOOP static void ngen_f16_narrow(uintptr_t dst, const float *src, int rows, int cols, int ld) {
	uint16_t *d = (uint16_t *)dst;
	const uint32_t *s = (const uint32_t *)src;
	for (long long r = 0; r < rows; r++)
		for (long long j = 0; j < cols; j++) {
			const uint32_t u = s[r * cols + j];
			const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
			const uint32_t normal = (a - (112u << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
			const int e = (int)(a >> 23);
			const int sh = 126 - e < 1 ? 1 : (126 - e > 31 ? 31 : 126 - e);
			const uint32_t m = (a & 0x7fffffu) | 0x800000u;
			const uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), half = 1u << (sh - 1);
			const uint32_t sub = q + ((rem > half) | ((rem == half) & (q & 1u)));
			uint32_t h = a < 0x38800000u ? sub : normal;
			h = a >= 0x47800000u ? 0x7c00u : h;
			d[r * ld + j] = (uint16_t)(a > 0x7f800000u ? 0x7fffu : (h | sign));
		}
}
// The same two f16 conversions with F16C's instructions, on CPUs that
// have them (every one with AVX2): vcvtph2ps widens exactly (a NaN comes
// out quieted, which no product can tell), and vcvtps2ph with round to
// nearest even is __float2half_rn but for NaN, which is made 0x7fff as
// CUDA makes it. About ten times the integer loops' speed: they were
// most of an f16 GEMM's cost beyond f32's (the f16 ConvNet's conv2
// products 10.8 ms a step against f32's 3.4).
__attribute__((target("avx2,f16c"))) static void ngen_f16_widen_f16c(float *dst, uintptr_t src, int rows, int cols, int ld) {
	const uint16_t *s = (const uint16_t *)src;
	for (long long r = 0; r < rows; r++) {
		const uint16_t *sr = s + r * ld;
		float *dr = dst + r * cols;
		long long j = 0;
		for (; j + 8 <= cols; j += 8)
			_mm256_storeu_ps(dr + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sr + j))));
		for (; j < cols; j++)
			dr[j] = _cvtsh_ss(sr[j]);
	}
}
__attribute__((target("avx2,f16c"))) static void ngen_f16_narrow_f16c(uintptr_t dst, const float *src, int rows, int cols, int ld) {
	uint16_t *d = (uint16_t *)dst;
	const __m128i canon = _mm_set1_epi16(0x7fff);
	for (long long r = 0; r < rows; r++) {
		const float *sr = src + r * cols;
		uint16_t *dr = d + r * ld;
		long long j = 0;
		for (; j + 8 <= cols; j += 8) {
			const __m256 x = _mm256_loadu_ps(sr + j);
			const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
			const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
			const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(nan), _mm256_extracti128_si256(nan, 1));
			_mm_storeu_si128((__m128i *)(dr + j), _mm_blendv_epi8(h, canon, nan16));
		}
		for (; j < cols; j++) {
			const float x = sr[j];
			dr[j] = x != x ? 0x7fffu : _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
		}
	}
}
// ngen_f16c says whether the f16 conversions take F16C's instructions:
// where the CPU has F16C and AVX2, unless NGEN_F16C=0 in the environment
// (to measure the integer loops) or ngen_f16c_set (tests, both paths).
static int ngen_f16c_state = -1; // read and written atomically: GEMM workers ask at once
static int ngen_f16c_supported(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"); }
static int ngen_f16c(void) {
	int v = __atomic_load_n(&ngen_f16c_state, __ATOMIC_RELAXED);
	if (v < 0) {
		const char *e = getenv("NGEN_F16C");
		v = ngen_f16c_supported() && !(e && strcmp(e, "0") == 0);
		__atomic_store_n(&ngen_f16c_state, v, __ATOMIC_RELAXED);
	}
	return v;
}
static void ngen_f16c_set(int v) { __atomic_store_n(&ngen_f16c_state, v, __ATOMIC_RELAXED); }

// ngen_half_widen and ngen_half_narrow pick the type: f16 nonzero for
// binary16, else bfloat16.
static void ngen_half_widen(int f16, float *dst, uintptr_t src, int rows, int cols, int ld) {
	if (f16 && ngen_f16c())
		ngen_f16_widen_f16c(dst, src, rows, cols, ld);
	else if (f16)
		ngen_f16_widen(dst, src, rows, cols, ld);
	else
		ngen_bf16_widen(dst, src, rows, cols, ld);
}
static void ngen_half_narrow(int f16, uintptr_t dst, const float *src, int rows, int cols, int ld) {
	if (f16 && ngen_f16c())
		ngen_f16_narrow_f16c(dst, src, rows, cols, ld);
	else if (f16)
		ngen_f16_narrow(dst, src, rows, cols, ld);
	else
		ngen_bf16_narrow(dst, src, rows, cols, ld);
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// bf16Widen sends every bfloat16 product through the widen-sgemm-narrow
// path even where oneDNN has a native matmul: NGEN_BF16_GEMM=widen sets
// it (to measure what a CPU without AVX512-BF16 runs), and tests do.
// bf16Native counts the products oneDNN's matmul ran.
var (
	bf16Widen  = os.Getenv("NGEN_BF16_GEMM") == "widen"
	bf16Native atomic.Int64
)

// f16cSupported says whether the CPU has the F16C conversions the f16
// products widen and narrow with; setF16C turns them on or off (tests
// run both paths; NGEN_F16C=0 turns them off for a process).
func f16cSupported() bool { return C.ngen_f16c_supported() != 0 }
func f16cOn() bool        { return C.ngen_f16c() != 0 }
func setF16C(on bool)     { C.ngen_f16c_set(C.int(boolInt(on))) }

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// gemmHalf runs a product whose A, B and C are bfloat16 or binary16 as
// cublasGemmEx with CUBLAS_COMPUTE_32F does: products accumulated in
// f32, alpha and beta applied in f32, and C rounded to the 16-bit type
// once (__float2bfloat16_rn's or __float2half_rn's rule), on the calling
// thread (Gemm shares products between threads as it does f32 ones).
//
// A bfloat16 product of packed matrices goes to oneDNN's matmul where it
// has a native implementation (AVX512-BF16's dot products or AMX: about
// 2x the f32 sgemm's rate on the MLP's shapes; its dot-product
// instructions flush subnormal inputs and products to zero, which
// __float2bfloat16_rn's inputs hardly reach). Otherwise, and for f16 (no
// native f16 matmul in oneDNN 2.6 before AVX512-FP16), the operands are
// widened to f32 (exact), multiplied by oneDNN's sgemm (products of 8- or
// 11-bit significands are exact in f32's 24, so only the sums round, in
// the library's order) and C is narrowed. The sums' order differs
// between the two paths, so a CPU with AVX512-BF16 and one without agree
// to rounding, not bit for bit.
//
// A batch into one C (StrideC 0: a sum when beta is 1) takes the
// widening path, keeps C in f32 from the first entry to the last and
// rounds it once at the end, as one GEMM with f32 accumulation would:
// rounding after each entry would lose every sample's product below half
// a 16-bit ulp of the running sum. (ngen's plans issue none:
// compiler/fuse.go keeps a 16-bit product apart from its batch sum, and
// the GPU backend refuses one; this is the CPU's meaning of the call.)
func gemmHalf(g runtime.GemmArgs) error {
	var f16 C.int
	switch g.DType {
	case runtime.BF16:
	case runtime.F16:
		f16 = 1
	default:
		return fmt.Errorf("dtype %s: not a 16-bit type", g.DType)
	}
	if f16 == 0 && !bf16Widen && (g.Batch == 1 || g.StrideC != 0) {
		sa, sb := g.StrideA, g.StrideB
		if g.Batch == 1 {
			sa, sb = 0, 0
		}
		switch C.ngen_bf16_matmul(C.int(boolInt(bool(g.TransA))), C.int(boolInt(bool(g.TransB))), C.longlong(g.Batch),
			C.longlong(g.M), C.longlong(g.N), C.longlong(g.K), C.float(g.Alpha),
			C.uintptr_t(g.A), C.longlong(g.LDA), C.longlong(sa), C.uintptr_t(g.B), C.longlong(g.LDB), C.longlong(sb),
			C.float(g.Beta), C.uintptr_t(g.C), C.longlong(g.LDC), C.longlong(g.StrideC), C.int(boolInt(g.F32Out))) {
		case 0:
			bf16Native.Add(1)
			return nil
		case -1:
			return fmt.Errorf("oneDNN's bfloat16 matmul failed")
		}
	}
	one := g.StrideC == 0 && g.Batch > 1 // every entry into the same C
	if g.F32Out && one {
		return fmt.Errorf("an f32 C summing a batch of 16-bit products is not built (not one larger product)")
	}
	rowsA, colsA := g.M, g.K
	if g.TransA {
		rowsA, colsA = colsA, rowsA
	}
	rowsB, colsB := g.K, g.N
	if g.TransB {
		rowsB, colsB = colsB, rowsB
	}
	na, nb, nc := rowsA*colsA, rowsB*colsB, g.M*g.N
	buf := C.malloc(C.size_t(4 * (na + nb + nc)))
	if buf == nil {
		return fmt.Errorf("out of memory for f32 copies of a %dx%dx%d 16-bit product", g.M, g.N, g.K)
	}
	defer C.free(buf)
	fa := (*C.float)(buf)
	fb := (*C.float)(unsafe.Add(buf, 4*na))
	fc := (*C.float)(unsafe.Add(buf, 4*(na+nb)))
	f := g
	f.DType, f.LDA, f.LDB, f.LDC, f.F32Out = runtime.F32, colsA, colsB, g.N, false
	if g.F32Out {
		f.LDC = g.LDC // the product goes straight into C
	}
	for i := range g.Batch {
		a := C.uintptr_t(uintptr(g.A) + uintptr(i*g.StrideA)*2)
		b := C.uintptr_t(uintptr(g.B) + uintptr(i*g.StrideB)*2)
		c := C.uintptr_t(uintptr(g.C) + uintptr(i*g.StrideC)*uintptr(g.CSize()))
		C.ngen_half_widen(f16, fa, a, C.int(rowsA), C.int(colsA), C.int(g.LDA))
		C.ngen_half_widen(f16, fb, b, C.int(rowsB), C.int(colsB), C.int(g.LDB))
		pa, pb, pc := C.uintptr_t(uintptr(unsafe.Pointer(fa))), C.uintptr_t(uintptr(unsafe.Pointer(fb))), C.uintptr_t(uintptr(unsafe.Pointer(fc)))
		if g.F32Out {
			if err := sgemm(oneDNN, f, pa, pb, c); err != nil {
				return err
			}
			continue
		}
		if g.Beta != 0 && (i == 0 || !one) {
			C.ngen_half_widen(f16, fc, c, C.int(g.M), C.int(g.N), C.int(g.LDC))
		}
		if err := sgemm(oneDNN, f, pa, pb, pc); err != nil {
			return err
		}
		if !one || i == g.Batch-1 {
			C.ngen_half_narrow(f16, c, fc, C.int(g.M), C.int(g.N), C.int(g.LDC))
		}
	}
	return nil
}
