package cpu

/*
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// ngen_bf16_widen copies the rows×cols matrix of bfloat16 at src (leading
// dimension ld) into the packed f32 matrix dst: exact.
static void ngen_bf16_widen(float *dst, uintptr_t src, int rows, int cols, int ld) {
	const uint16_t *s = (const uint16_t *)src;
	for (long long r = 0; r < rows; r++)
		for (long long j = 0; j < cols; j++) {
			uint32_t u = (uint32_t)s[r * ld + j] << 16;
			memcpy(&dst[r * cols + j], &u, 4);
		}
}
// ngen_bf16_narrow rounds the packed f32 matrix src into the bfloat16
// matrix dst (leading dimension ld) as __float2bfloat16_rn does: to
// nearest, ties to even, every NaN to 0x7fff (runtime/cpu/emu/ngen_half.h).
static void ngen_bf16_narrow(uintptr_t dst, const float *src, int rows, int cols, int ld) {
	uint16_t *d = (uint16_t *)dst;
	for (long long r = 0; r < rows; r++)
		for (long long j = 0; j < cols; j++) {
			uint32_t u;
			memcpy(&u, &src[r * cols + j], 4);
			if ((u & 0x7fffffffu) > 0x7f800000u) {
				d[r * ld + j] = 0x7fff;
				continue;
			}
			u += 0x7fffu + ((u >> 16) & 1);
			d[r * ld + j] = (uint16_t)(u >> 16);
		}
}
// ngen_f16_widen copies the rows×cols matrix of IEEE binary16 at src
// (leading dimension ld) into the packed f32 matrix dst: exact
// (ngen_half.h's h2f).
static void ngen_f16_widen(float *dst, uintptr_t src, int rows, int cols, int ld) {
	const uint16_t *s = (const uint16_t *)src;
	for (long long r = 0; r < rows; r++)
		for (long long j = 0; j < cols; j++) {
			const uint16_t h = s[r * ld + j];
			const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
			uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
			if (e == 0x1f)
				u = sign | 0x7f800000u | (m << 13);
			else if (e)
				u = sign | ((e + 112) << 23) | (m << 13);
			else if (!m)
				u = sign;
			else { // a subnormal: normalise
				e = 113;
				while (!(m & 0x400u)) {
					m <<= 1;
					e--;
				}
				u = sign | (e << 23) | ((m & 0x3ffu) << 13);
			}
			memcpy(&dst[r * cols + j], &u, 4);
		}
}
// ngen_f16_narrow rounds the packed f32 matrix src into the binary16
// matrix dst (leading dimension ld) as __float2half_rn does: to nearest,
// ties to even, overflow to ±inf, every NaN to 0x7fff (ngen_half.h's
// f2h).
static void ngen_f16_narrow(uintptr_t dst, const float *src, int rows, int cols, int ld) {
	uint16_t *d = (uint16_t *)dst;
	for (long long r = 0; r < rows; r++)
		for (long long j = 0; j < cols; j++) {
			uint32_t u;
			memcpy(&u, &src[r * cols + j], 4);
			const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
			uint16_t h;
			if (a > 0x7f800000u)
				h = 0x7fffu;
			else if (a >= 0x477ff000u)
				h = (uint16_t)(sign | 0x7c00u);
			else if (a <= 0x33000000u)
				h = (uint16_t)sign;
			else {
				const uint32_t e = a >> 23;
				uint32_t m = a & 0x7fffffu;
				if (e < 113) {
					m |= 0x800000u;
					const uint32_t shift = 126 - e;
					uint32_t r2 = m >> shift;
					const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
					r2 += rem > halfway || (rem == halfway && (r2 & 1));
					h = (uint16_t)(sign | r2);
				} else {
					uint32_t x = ((e - 112) << 10) | (m >> 13);
					const uint32_t rem = m & 0x1fffu;
					x += rem > 0x1000u || (rem == 0x1000u && (x & 1));
					h = (uint16_t)(sign | x);
				}
			}
			d[r * ld + j] = h;
		}
}
// ngen_half_widen and ngen_half_narrow pick the type: f16 nonzero for
// binary16, else bfloat16.
static void ngen_half_widen(int f16, float *dst, uintptr_t src, int rows, int cols, int ld) {
	if (f16)
		ngen_f16_widen(dst, src, rows, cols, ld);
	else
		ngen_bf16_widen(dst, src, rows, cols, ld);
}
static void ngen_half_narrow(int f16, uintptr_t dst, const float *src, int rows, int cols, int ld) {
	if (f16)
		ngen_f16_narrow(dst, src, rows, cols, ld);
	else
		ngen_bf16_narrow(dst, src, rows, cols, ld);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// gemmHalf runs a product whose A, B and C are bfloat16 or binary16 as
// cublasGemmEx with CUBLAS_COMPUTE_32F does: the operands widened to f32
// (exact), the product accumulated in f32 by oneDNN's sgemm (products of
// 8- or 11-bit significands are exact in f32's 24, so only the sums
// round, in the library's order), alpha and beta applied in f32, and C
// rounded to the 16-bit type once (__float2bfloat16_rn's or
// __float2half_rn's rule). It runs on the calling thread, one batch
// entry after another. A batch into one C (StrideC 0: a sum when beta is
// 1) keeps C in f32 from the first entry to the last and rounds it once
// at the end, as one GEMM with f32 accumulation would: rounding after
// each entry would lose every sample's product below half a 16-bit ulp
// of the running sum. (ngen's plans issue none: compiler/fuse.go keeps a
// 16-bit product apart from its batch sum, and the GPU backend refuses
// one; this is the CPU's meaning of the call.)
func gemmHalf(g runtime.GemmArgs) error {
	var f16 C.int
	switch g.DType {
	case runtime.BF16:
	case runtime.F16:
		f16 = 1
	default:
		return fmt.Errorf("dtype %s: not a 16-bit type", g.DType)
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
	f.DType, f.LDA, f.LDB, f.LDC = runtime.F32, colsA, colsB, g.N
	one := g.StrideC == 0 && g.Batch > 1 // every entry into the same C
	for i := range g.Batch {
		a := C.uintptr_t(uintptr(g.A) + uintptr(i*g.StrideA)*2)
		b := C.uintptr_t(uintptr(g.B) + uintptr(i*g.StrideB)*2)
		c := C.uintptr_t(uintptr(g.C) + uintptr(i*g.StrideC)*2)
		C.ngen_half_widen(f16, fa, a, C.int(rowsA), C.int(colsA), C.int(g.LDA))
		C.ngen_half_widen(f16, fb, b, C.int(rowsB), C.int(colsB), C.int(g.LDB))
		if g.Beta != 0 && (i == 0 || !one) {
			C.ngen_half_widen(f16, fc, c, C.int(g.M), C.int(g.N), C.int(g.LDC))
		}
		pa, pb, pc := C.uintptr_t(uintptr(unsafe.Pointer(fa))), C.uintptr_t(uintptr(unsafe.Pointer(fb))), C.uintptr_t(uintptr(unsafe.Pointer(fc)))
		if err := sgemm(oneDNN, f, pa, pb, pc); err != nil {
			return err
		}
		if !one || i == g.Batch-1 {
			C.ngen_half_narrow(f16, c, fc, C.int(g.M), C.int(g.N), C.int(g.LDC))
		}
	}
	return nil
}
