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
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// gemmHalf runs a product whose A, B and C are bfloat16 as cublasGemmEx
// with CUBLAS_COMPUTE_32F does: the operands widened to f32 (exact), the
// product accumulated in f32 by oneDNN's sgemm (so products are exact and
// only the sums round, in the library's order), alpha and beta applied in
// f32, and C rounded to bfloat16 once. It runs on the calling thread, one
// batch entry after another. F16 is not built yet (docs/AMP.md).
func gemmHalf(g runtime.GemmArgs) error {
	if g.DType != runtime.BF16 {
		return fmt.Errorf("dtype %s: only bf16 of the 16-bit types is built", g.DType)
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
		return fmt.Errorf("out of memory for f32 copies of a %dx%dx%d bf16 product", g.M, g.N, g.K)
	}
	defer C.free(buf)
	fa := (*C.float)(buf)
	fb := (*C.float)(unsafe.Add(buf, 4*na))
	fc := (*C.float)(unsafe.Add(buf, 4*(na+nb)))
	f := g
	f.DType, f.LDA, f.LDB, f.LDC = runtime.F32, colsA, colsB, g.N
	for i := range g.Batch {
		a := C.uintptr_t(uintptr(g.A) + uintptr(i*g.StrideA)*2)
		b := C.uintptr_t(uintptr(g.B) + uintptr(i*g.StrideB)*2)
		c := C.uintptr_t(uintptr(g.C) + uintptr(i*g.StrideC)*2)
		C.ngen_bf16_widen(fa, a, C.int(rowsA), C.int(colsA), C.int(g.LDA))
		C.ngen_bf16_widen(fb, b, C.int(rowsB), C.int(colsB), C.int(g.LDB))
		if g.Beta != 0 {
			C.ngen_bf16_widen(fc, c, C.int(g.M), C.int(g.N), C.int(g.LDC))
		}
		pa, pb, pc := C.uintptr_t(uintptr(unsafe.Pointer(fa))), C.uintptr_t(uintptr(unsafe.Pointer(fb))), C.uintptr_t(uintptr(unsafe.Pointer(fc)))
		if err := sgemm(oneDNN, f, pa, pb, pc); err != nil {
			return err
		}
		C.ngen_bf16_narrow(c, fc, C.int(g.M), C.int(g.N), C.int(g.LDC))
	}
	return nil
}
