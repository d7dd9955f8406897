package cpu

/*
#cgo LDFLAGS: -lopenblas -ldnnl -lgomp
#include <stdint.h>
#include <stdlib.h>
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

// ngen_sgemm runs one f32 product with oneDNN's sgemm (row-major, like
// cblas) on the calling thread: oneDNN's OpenMP team is sized to one here,
// per thread, since the device shares GEMMs between its own threads.
static int ngen_sgemm(int ta, int tb, int m, int n, int k, float alpha, uintptr_t a, int lda,
                      uintptr_t b, int ldb, float beta, uintptr_t c, int ldc) {
	if (omp_get_max_threads() != 1)
		omp_set_num_threads(1);
	return (int)dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, (const float *)a, lda,
	                       (const float *)b, ldb, beta, (float *)c, ldc);
}
// ngen_add_into adds the packed m×n partial product p into c (leading
// dimension ldc), elements of es bytes (4: float, 8: double).
static void ngen_add_into(uintptr_t c, int ldc, uintptr_t p, int m, int n, int es) {
	for (int r = 0; r < m; r++)
		for (int j = 0; j < n; j++) {
			if (es == 4)
				((float *)c)[(long long)r * ldc + j] += ((const float *)p)[(long long)r * n + j];
			else
				((double *)c)[(long long)r * ldc + j] += ((const double *)p)[(long long)r * n + j];
		}
}
// ngen_add_transposed adds the transpose of the packed n×m f32 matrix t
// into the m×n matrix c (leading dimension ldc).
static void ngen_add_transposed(uintptr_t c, int ldc, uintptr_t t, int m, int n) {
	for (int r = 0; r < m; r++)
		for (int j = 0; j < n; j++)
			((float *)c)[(long long)r * ldc + j] += ((const float *)t)[(long long)j * m + r];
}
static void ngen_dgemm(int ta, int tb, int m, int n, int k, double alpha, uintptr_t a, int lda,
                       uintptr_t b, int ldb, double beta, uintptr_t c, int ldc) {
	cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
	            m, n, k, alpha, (const double *)a, lda, (const double *)b, ldb, beta, (double *)c, ldc);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// setBLASThreads sizes OpenBLAS's own thread pool, used for f64 products
// (see gemmSplit: the device keeps it at one).
func setBLASThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

// Gemm computes C = alpha*op(A)*op(B) + beta*C in row-major order, once
// per batch entry: f32 with oneDNN's sgemm, f64 with OpenBLAS's dgemm. A
// leading dimension of 0 means the matrix is packed (its row length).
func (d *Device) Gemm(g runtime.GemmArgs) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	if err := normalizeGemm(&g); err != nil {
		return fmt.Errorf("cpu: gemm %s %dx%dx%d: %v", g.DType, g.M, g.N, g.K, err)
	}
	if g.M == 0 || g.N == 0 {
		return nil
	}
	collapseBatch(&g)
	var err error
	switch {
	case d.threads > 1 && g.Batch >= 2 && (g.StrideC != 0 || g.Beta == 1):
		err = d.gemmSplit(g)
	case d.threads > 1 && g.M >= 2*d.threads:
		err = d.gemmRows(g)
	default:
		err = gemmSeq(g)
	}
	if err != nil {
		return fmt.Errorf("cpu: gemm %s %dx%dx%d: %v", g.DType, g.M, g.N, g.K, err)
	}
	return nil
}

// collapseBatch runs a batch that is one product as that product: Batch·M
// rows (runtime.MConcat, the GPU backend's "m-concat"), or, for a batch
// summed into one C, K = Batch·K (runtime.KConcatGemm, "k-concat"). Each
// library call packs B anew: the TransformerLM's linear2 (16 products of
// 64×256×1024) ran at 67-70 GFLOP/s in the step, one 1024-row product at
// about 100. A summed batch also read and wrote all of C once per entry
// (the gpt's 17 weight gradients, each 16 products with K = 128). The
// library may block the sums differently, so their last bits may move.
func collapseBatch(g *runtime.GemmArgs) {
	if one, ok := runtime.MConcat(*g); ok {
		*g = one
	} else if one, ok := runtime.KConcatGemm(*g); ok {
		*g = one
	}
}

// gemmRows runs each product with the rows of C split across the device's
// threads, one library call per share.
func (d *Device) gemmRows(g runtime.GemmArgs) error {
	nw := d.threads
	es := uintptr(g.DType.Size())
	errs := make([]error, nw)
	var wg sync.WaitGroup
	for w := range nw {
		lo, hi := g.M*w/nw, g.M*(w+1)/nw
		sub := g
		sub.M = hi - lo
		// Row lo of op(A): row lo of A, or column lo when A is transposed.
		if g.TransA {
			sub.A = g.A + runtime.Ptr(uintptr(lo)*es)
		} else {
			sub.A = g.A + runtime.Ptr(uintptr(lo*g.LDA)*es)
		}
		sub.C = g.C + runtime.Ptr(uintptr(lo*g.LDC)*es)
		wg.Go(func() { errs[w] = gemmSeq(sub) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// The device runs each library call single-threaded and shares GEMMs
// between its own threads: by batch (gemmSplit) or by rows of C
// (gemmRows). OpenBLAS's own pool shared each small per-image GEMM of a
// convolution badly, and its idle threads spin on the cores the kernel
// workers need: at two threads the ConvNet step was slower than at one.
//
// f32 products go to oneDNN's sgemm (the library PyTorch's CPU build runs
// its convolutions on): it picks its kernels by the CPU it finds, AVX-512
// where there is one, while OpenBLAS may be pinned to older ones by
// OPENBLAS_CORETYPE. On the ConvNet's shapes, under the AVX2 pin, it
// takes about half OpenBLAS's time (docs/PERF.md).

// gemmSplit runs a batch of products with the batch split across the
// device's threads. A batch
// summed into one C (StrideC 0, beta 1) gives each thread past the first
// its own zeroed partial sum, added into C at the end: the order of the
// sum depends on the thread count, as the kernels' reductions may.
func (d *Device) gemmSplit(g runtime.GemmArgs) error {
	nw := min(d.threads, g.Batch)
	es := uintptr(g.DType.Size())
	sum := g.StrideC == 0
	parts := make([]unsafe.Pointer, nw)
	errs := make([]error, nw)
	var wg sync.WaitGroup
	for w := range nw {
		lo, hi := g.Batch*w/nw, g.Batch*(w+1)/nw
		sub := g
		sub.Batch = hi - lo
		sub.A = g.A + runtime.Ptr(uintptr(lo*g.StrideA)*es)
		sub.B = g.B + runtime.Ptr(uintptr(lo*g.StrideB)*es)
		sub.C = g.C + runtime.Ptr(uintptr(lo*g.StrideC)*es)
		if sum && w > 0 {
			parts[w] = C.calloc(C.size_t(g.M*g.N), C.size_t(es))
			sub.C, sub.LDC = runtime.Ptr(uintptr(parts[w])), g.N
		}
		wg.Go(func() { errs[w] = gemmSeq(sub) })
	}
	wg.Wait()
	for w := 1; sum && w < nw; w++ {
		C.ngen_add_into(C.uintptr_t(uintptr(g.C)), C.int(g.LDC), C.uintptr_t(uintptr(parts[w])), C.int(g.M), C.int(g.N), C.int(es))
		C.free(parts[w])
	}
	return errors.Join(errs...)
}

// skinnySum reports whether g is an f32 batch summed into one narrow C,
// as conv1's weight gradient (32×9, 64 products of K = 784): oneDNN
// computes those in half the time transposed, C^T += op(B)^T·op(A)^T,
// into a zeroed C^T that is added into C once (0.28 against 0.53 ms for
// that gradient, measured in a C loop).
func skinnySum(g runtime.GemmArgs) bool {
	return g.DType == runtime.F32 && g.StrideC == 0 && g.Beta == 1 && g.Batch >= 2 && g.N < 16 && g.M >= 2*g.N
}

// gemmSeq runs g's products one after another on the calling thread.
func gemmSeq(g runtime.GemmArgs) error {
	if skinnySum(g) {
		ct := C.calloc(C.size_t(g.M*g.N), 4)
		if ct == nil {
			return fmt.Errorf("out of memory for a %dx%d partial sum", g.N, g.M)
		}
		defer C.free(ct)
		// op(B)^T is B read with the other transpose flag; likewise A.
		// The transposed problem is not skinny (its M < 2N), so this
		// does not recurse again.
		t := g
		t.M, t.N = g.N, g.M
		t.A, t.LDA, t.StrideA, t.TransA = g.B, g.LDB, g.StrideB, !g.TransB
		t.B, t.LDB, t.StrideB, t.TransB = g.A, g.LDA, g.StrideA, !g.TransA
		t.C, t.LDC = runtime.Ptr(uintptr(ct)), g.M
		if err := gemmSeq(t); err != nil {
			return err
		}
		C.ngen_add_transposed(C.uintptr_t(uintptr(g.C)), C.int(g.LDC), C.uintptr_t(uintptr(ct)), C.int(g.M), C.int(g.N))
		return nil
	}
	ta, tb := cbool(g.TransA), cbool(g.TransB)
	es := uintptr(g.DType.Size())
	for i := range g.Batch {
		a := C.uintptr_t(uintptr(g.A) + uintptr(i*g.StrideA)*es)
		b := C.uintptr_t(uintptr(g.B) + uintptr(i*g.StrideB)*es)
		c := C.uintptr_t(uintptr(g.C) + uintptr(i*g.StrideC)*es)
		if g.DType == runtime.F32 {
			st := C.ngen_sgemm(ta, tb, C.int(g.M), C.int(g.N), C.int(g.K), C.float(g.Alpha), a, C.int(g.LDA),
				b, C.int(g.LDB), C.float(g.Beta), c, C.int(g.LDC))
			if st != 0 {
				return fmt.Errorf("oneDNN sgemm failed (dnnl_status_t %d)", st)
			}
		} else {
			C.ngen_dgemm(ta, tb, C.int(g.M), C.int(g.N), C.int(g.K), C.double(g.Alpha), a, C.int(g.LDA),
				b, C.int(g.LDB), C.double(g.Beta), c, C.int(g.LDC))
		}
	}
	return nil
}

func cbool(t runtime.Transpose) C.int {
	if t {
		return 1
	}
	return 0
}

// normalizeGemm fills in defaults and checks what cblas would otherwise
// report by printing to stderr.
func normalizeGemm(g *runtime.GemmArgs) error {
	if g.DType != runtime.F32 && g.DType != runtime.F64 {
		return fmt.Errorf("dtype %s not supported, want f32 or f64", g.DType)
	}
	if g.M < 0 || g.N < 0 || g.K < 0 || g.Batch < 0 {
		return fmt.Errorf("negative size (batch %d)", g.Batch)
	}
	if g.StrideA < 0 || g.StrideB < 0 || g.StrideC < 0 {
		return fmt.Errorf("negative batch stride (%d, %d, %d)", g.StrideA, g.StrideB, g.StrideC)
	}
	if g.Batch == 0 {
		g.Batch = 1
	}
	// Stored shapes: A is M×K (K×M transposed), B is K×N (N×K), C is M×N.
	colsA, colsB := g.K, g.N
	if g.TransA {
		colsA = g.M
	}
	if g.TransB {
		colsB = g.K
	}
	for _, ld := range []struct {
		name string
		v    *int
		min  int
	}{{"LDA", &g.LDA, colsA}, {"LDB", &g.LDB, colsB}, {"LDC", &g.LDC, g.N}} {
		if *ld.v == 0 {
			*ld.v = max(ld.min, 1)
		}
		if *ld.v < max(ld.min, 1) {
			return fmt.Errorf("%s = %d, want >= %d", ld.name, *ld.v, max(ld.min, 1))
		}
		if *ld.v > math.MaxInt32 {
			return fmt.Errorf("%s = %d exceeds cblas's int", ld.name, *ld.v)
		}
	}
	if g.M > math.MaxInt32 || g.N > math.MaxInt32 || g.K > math.MaxInt32 {
		return fmt.Errorf("size exceeds cblas's int")
	}
	if g.M > 0 && g.N > 0 && (g.C == 0 || (g.K > 0 && (g.A == 0 || g.B == 0))) {
		return fmt.Errorf("null matrix pointer")
	}
	return nil
}
