package cpu

/*
#cgo LDFLAGS: -lopenblas -ldnnl -lgomp
#include <stdint.h>
#include <stdlib.h>
#include <strings.h>
#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

// ngen_avx2_libraries says whether oneDNN runs its AVX2 kernels (its
// effective ISA is AVX2, with or without VNNI: no AVX-512) and OpenBLAS
// its Haswell or Zen ones (OPENBLAS_CORETYPE may pin another).
static int ngen_avx2_libraries(void) {
	dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
	const char *core = openblas_get_corename();
	return (isa == dnnl_cpu_isa_avx2 || isa == dnnl_cpu_isa_avx2_vnni) && core != 0 &&
	       (strcasecmp(core, "haswell") == 0 || strcasecmp(core, "zen") == 0);
}

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
// ngen_sgemm_blas is the same product with OpenBLAS's cblas_sgemm (its
// pool is kept at one thread: setBLASThreads).
static void ngen_sgemm_blas(int ta, int tb, int m, int n, int k, float alpha, uintptr_t a, int lda,
                            uintptr_t b, int ldb, float beta, uintptr_t c, int ldc) {
	cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
	            m, n, k, alpha, (const float *)a, lda, (const float *)b, ldb, beta, (float *)c, ldc);
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
	"sync/atomic"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// setBLASThreads sizes OpenBLAS's own thread pool, used for f64 products
// (see gemmSplit: the device keeps it at one).
func setBLASThreads(n int) { C.openblas_set_num_threads(C.int(n)) }

// Gemm computes C = alpha*op(A)*op(B) + beta*C in row-major order, once
// per batch entry: f32 with oneDNN's sgemm, f64 with OpenBLAS's dgemm,
// bf16 and f16 as gemm_half.go says, shared between the device's threads
// as f32 products are (by batch entries or rows of C). A
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
	half := g.DType == runtime.BF16 || g.DType == runtime.F16
	switch {
	case half && g.Batch > 1 && g.StrideC == 0:
		// A 16-bit batch summed into one C rounds once, on one thread.
		err = gemmHalf(g)
	case d.threads > 1 && g.Batch >= 2 && (g.StrideC != 0 || g.Beta == 1):
		err = d.gemmSplit(g)
	case d.threads > 1 && g.M >= 2*d.threads && !(half && bool(g.TransA)):
		// (A 16-bit product with A transposed stays whole: a share of
		// its columns is not a packed matrix, which oneDNN's native
		// bfloat16 matmul needs.)
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
		sub.C = g.C + runtime.Ptr(uintptr(lo*g.LDC)*uintptr(g.CSize()))
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
		sub.C = g.C + runtime.Ptr(uintptr(lo*g.StrideC)*uintptr(g.CSize()))
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
	if g.DType == runtime.BF16 || g.DType == runtime.F16 {
		return gemmHalf(g)
	}
	if skinnySum(g) {
		ct := C.calloc(C.size_t(g.M*g.N), 4)
		if ct == nil {
			return fmt.Errorf("out of memory for a %dx%d partial sum", g.N, g.M)
		}
		defer C.free(ct)
		if err := gemmSeq(transposedSum(g, runtime.Ptr(uintptr(ct)))); err != nil {
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
			if err := sgemm(sgemmLibrary(g), g, a, b, c); err != nil {
				return err
			}
		} else {
			C.ngen_dgemm(ta, tb, C.int(g.M), C.int(g.N), C.int(g.K), C.double(g.Alpha), a, C.int(g.LDA),
				b, C.int(g.LDB), C.double(g.Beta), c, C.int(g.LDC))
		}
	}
	return nil
}

// transposedSum is skinnySum's g as the product that computes C^T into
// the packed N×M scratch ct: op(B)^T is B read with the other transpose
// flag, likewise A. It is not skinny itself (its M < 2N), so gemmSeq
// does not transpose it again.
func transposedSum(g runtime.GemmArgs, ct runtime.Ptr) runtime.GemmArgs {
	t := g
	t.M, t.N = g.N, g.M
	t.A, t.LDA, t.StrideA, t.TransA = g.B, g.LDB, g.StrideB, !g.TransB
	t.B, t.LDB, t.StrideB, t.TransB = g.A, g.LDA, g.StrideA, !g.TransA
	t.C, t.LDC = ct, g.M
	return t
}

// sgemmLib is a library that computes f32 products.
type sgemmLib int

const (
	oneDNN sgemmLib = iota
	openBLAS
)

func (l sgemmLib) String() string { return [...]string{"oneDNN", "OpenBLAS"}[l] }

// blasCore is OpenBLAS's kernel set ("Haswell", "Zen", "SkylakeX").
func blasCore() string { return C.GoString(C.openblas_get_corename()) }

// avx2Libraries is ngen_avx2_libraries, asked once: the libraries pick
// their kernels when they load.
var avx2Libraries = sync.OnceValue(func() bool { return C.ngen_avx2_libraries() != 0 })

// byShape turns the per-shape choice off (false) for measurements that
// compare it with oneDNN alone in one process; never set otherwise.
var byShape atomic.Bool

func init() { byShape.Store(true) }

// sgemmLibrary is the library that computes g's products: oneDNN, except
// where both libraries run their AVX2 kernels and g is of a shape that
// OpenBLAS computes in clearly less time (openBLASShape). The choice is
// a rule on the shape, not a timing, so a run's results do not depend on
// the machine's load.
func sgemmLibrary(g runtime.GemmArgs) sgemmLib {
	if byShape.Load() && avx2Libraries() && openBLASShape(g) {
		return openBLAS
	}
	return oneDNN
}

// openBLASShape reports whether g is of a shape on which OpenBLAS's AVX2
// sgemm took clearly less time than oneDNN's AVX2 sgemm (one thread, AMD
// EPYC, every f32 shape of the generated packages' training steps, four
// runs: docs/PERF.md, "GEMM library per shape on AVX2"):
//
//   - op(A) = Aᵀ, op(B) = B, no side of the output under 128 and at most
//     256K elements, K at least 32, and either a side of 1024 or more,
//     or K of 1024 or more with at least 64K elements: the weight
//     gradients of Linear layers, summed over the tokens (k-concat). A
//     side of 1024 (1024×256, 256×1024, 1024×128, any K): 0.44 to 0.79
//     of oneDNN's time; K ≥ 1024 (512×128×4096, 512×256×1024,
//     256×256×1024, 768×256×2048): 0.67 to 0.95. Larger outputs
//     (2048×1024, 512×2048, 512×784, 128×3136) ran faster on oneDNN; the
//     rest of the window with small K (256×256×64, 512×128×64,
//     768×256×64) was even.
//   - op(A) = A, op(B) = B, M at most 128, N at least 1024, K at least
//     256: the input gradient of a wide Linear layer at small batch
//     (mlpbench's 128×2048×512: 0.55 to 0.72; one shape measured). With N
//     or K smaller (64×512×256: 0.74 to 0.97; 64×3136×128: 1.12 to 1.27)
//     the margin was small or oneDNN's.
//
// oneDNN was as fast or faster on every other shape, and about twice as
// fast on products of a few µs.
func openBLASShape(g runtime.GemmArgs) bool {
	mn, ta, tb := g.M*g.N, bool(g.TransA), bool(g.TransB)
	switch {
	case ta && !tb:
		if min(g.M, g.N) < 128 || mn > 1<<18 || g.K < 32 {
			return false
		}
		return max(g.M, g.N) >= 1024 || (g.K >= 1024 && mn >= 1<<16)
	case !ta && !tb:
		return g.M <= 128 && g.N >= 1024 && g.K >= 256
	}
	return false
}

// sgemm runs one f32 product of g's shape on a, b and c with lib.
func sgemm(lib sgemmLib, g runtime.GemmArgs, a, b, c C.uintptr_t) error {
	ta, tb := cbool(g.TransA), cbool(g.TransB)
	if lib == openBLAS {
		C.ngen_sgemm_blas(ta, tb, C.int(g.M), C.int(g.N), C.int(g.K), C.float(g.Alpha), a, C.int(g.LDA),
			b, C.int(g.LDB), C.float(g.Beta), c, C.int(g.LDC))
		return nil
	}
	if st := C.ngen_sgemm(ta, tb, C.int(g.M), C.int(g.N), C.int(g.K), C.float(g.Alpha), a, C.int(g.LDA),
		b, C.int(g.LDB), C.float(g.Beta), c, C.int(g.LDC)); st != 0 {
		return fmt.Errorf("oneDNN sgemm failed (dnnl_status_t %d)", st)
	}
	return nil
}

// sgemmOnce runs one f32 product of g's shape with lib on its first batch
// entry, for measurements.
func sgemmOnce(lib sgemmLib, g runtime.GemmArgs) error {
	return sgemm(lib, g, C.uintptr_t(uintptr(g.A)), C.uintptr_t(uintptr(g.B)), C.uintptr_t(uintptr(g.C)))
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
	if g.DType != runtime.F32 && g.DType != runtime.F64 && g.DType != runtime.BF16 && g.DType != runtime.F16 {
		return fmt.Errorf("dtype %s not supported, want f32, f64, bf16 or f16", g.DType)
	}
	if g.F32Out && g.DType != runtime.BF16 && g.DType != runtime.F16 {
		return fmt.Errorf("an f32 C of %s operands: want 16-bit operands", g.DType)
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
