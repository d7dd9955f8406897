//go:build cuda

package cuda

// The shim binds what gorgonia.org/cu v0.9.6 lacks: strided-batched GEMMs,
// cublasSetStream and cublasSetMathMode on a cuBLAS handle of our own, and
// CUDA graphs (stream capture, instantiate, launch, kernel-node updates).
// cu stays the binding for everything else; its handles are passed in by
// value (a cu.Stream or cu.Function is one C pointer).

/*
#cgo LDFLAGS: -lcublas -lcuda
#cgo linux CFLAGS: -I/usr/local/cuda/include
#cgo linux LDFLAGS: -L/usr/local/cuda/lib64
#include <cuda.h>
#include <cublas_v2.h>

static int ngen_blas_create(cublasHandle_t *h, CUstream s) {
	int st = cublasCreate(h);
	if (st != CUBLAS_STATUS_SUCCESS) return st;
	return cublasSetStream(*h, (cudaStream_t)s);
}

static int ngen_blas_math(cublasHandle_t h, int tf32) {
	return cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
}

static int ngen_blas_destroy(cublasHandle_t h) { return cublasDestroy(h); }

// ngen_gemm is one column-major GEMM, strided-batched when batch > 1, of
// dtype dt: 0 f32, 1 f64, 2 bf16, 3 f16. The 16-bit types go through
// cublasGemmEx with f32 accumulation (CUBLAS_COMPUTE_32F, tensor cores),
// as runtime/cpu's half GEMM widens to f32 and rounds C once.
static int ngen_gemm(cublasHandle_t h, int dt, int ta, int tb, int m, int n, int k,
		double alpha, unsigned long long a, int lda, long long sa,
		unsigned long long b, int ldb, long long sb, double beta,
		unsigned long long c, int ldc, long long sc, int batch, int cf32) {
	cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
	if (dt >= 2) {
		cudaDataType t = dt == 2 ? CUDA_R_16BF : CUDA_R_16F;
		cudaDataType ct = cf32 ? CUDA_R_32F : t; // an f32 C of 16-bit operands
		float al = (float)alpha, be = (float)beta;
		if (batch == 1)
			return cublasGemmEx(h, opa, opb, m, n, k, &al, (const void *)a, t, lda, (const void *)b, t, ldb,
				&be, (void *)c, ct, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
		return cublasGemmStridedBatchedEx(h, opa, opb, m, n, k, &al, (const void *)a, t, lda, sa,
			(const void *)b, t, ldb, sb, &be, (void *)c, ct, ldc, sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	}
	if (dt == 1) {
		if (batch == 1)
			return cublasDgemm(h, opa, opb, m, n, k, &alpha, (const double *)a, lda, (const double *)b, ldb, &beta, (double *)c, ldc);
		return cublasDgemmStridedBatched(h, opa, opb, m, n, k, &alpha, (const double *)a, lda, sa,
			(const double *)b, ldb, sb, &beta, (double *)c, ldc, sc, batch);
	}
	float al = (float)alpha, be = (float)beta;
	if (batch == 1)
		return cublasSgemm(h, opa, opb, m, n, k, &al, (const float *)a, lda, (const float *)b, ldb, &be, (float *)c, ldc);
	return cublasSgemmStridedBatched(h, opa, opb, m, n, k, &al, (const float *)a, lda, sa,
		(const float *)b, ldb, sb, &be, (float *)c, ldc, sc, batch);
}

static const char *ngen_cu_name(int r) {
	const char *s = 0;
	cuGetErrorName((CUresult)r, &s);
	return s ? s : "unknown CUresult";
}

static int ngen_capture_begin(CUstream s) {
	return cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED);
}

static int ngen_capture_end(CUstream s, CUgraph *g) { return cuStreamEndCapture(s, g); }

// ngen_capture_last is the node the stream's last captured call added,
// or NULL when that call added none or several.
static int ngen_capture_last(CUstream s, CUgraphNode *node) {
	CUstreamCaptureStatus st;
	const CUgraphNode *deps = 0;
	size_t n = 0;
	int r = cuStreamGetCaptureInfo_v2(s, &st, 0, 0, &deps, &n);
	*node = (r == CUDA_SUCCESS && n == 1) ? deps[0] : 0;
	return r;
}

static int ngen_graph_instantiate(CUgraphExec *e, CUgraph g) {
	return cuGraphInstantiateWithFlags(e, g, 0);
}

static int ngen_graph_launch(CUgraphExec e, CUstream s) { return cuGraphLaunch(e, s); }

static int ngen_graph_destroy(CUgraph g, CUgraphExec e) {
	int r1 = e ? cuGraphExecDestroy(e) : 0, r2 = g ? cuGraphDestroy(g) : 0;
	return r1 ? r1 : r2;
}

// ngen_graph_set_kernel replaces a kernel node's arguments in an
// instantiated graph; vals holds one 8-byte slot per parameter, as Launch
// builds them. The driver copies the values before returning.
static int ngen_graph_set_kernel(CUgraphExec e, CUgraphNode node, CUfunction f,
		unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		unsigned shared, unsigned long long *vals, int n) {
	void *ptrs[n > 0 ? n : 1];
	for (int i = 0; i < n; i++) ptrs[i] = &vals[i];
	CUDA_KERNEL_NODE_PARAMS p = {0};
	p.func = f;
	p.gridDimX = gx; p.gridDimY = gy; p.gridDimZ = gz;
	p.blockDimX = bx; p.blockDimY = by; p.blockDimZ = bz;
	p.sharedMemBytes = shared;
	p.kernelParams = ptrs;
	return cuGraphExecKernelNodeSetParams(e, node, &p);
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/ngen-ml/ngen/runtime"
)

// cStream is the CUstream inside a cu.Stream (a struct of one pointer).
func cStream(s cu.Stream) C.CUstream { return *(*C.CUstream)(unsafe.Pointer(&s)) }

// cFunction is the CUfunction inside a cu.Function.
func cFunction(f cu.Function) C.CUfunction { return *(*C.CUfunction)(unsafe.Pointer(&f)) }

// blasHandle is a cuBLAS handle bound to the device's stream.
type blasHandle struct{ h C.cublasHandle_t }

func newBLAS(s cu.Stream, tf32 bool) (*blasHandle, error) {
	b := &blasHandle{}
	if st := C.ngen_blas_create(&b.h, cStream(s)); st != 0 {
		return nil, fmt.Errorf("cublasCreate/cublasSetStream: %s", blasStatus(int(st)))
	}
	if tf32 {
		if st := C.ngen_blas_math(b.h, 1); st != 0 {
			C.ngen_blas_destroy(b.h)
			return nil, fmt.Errorf("cublasSetMathMode(TF32): %s", blasStatus(int(st)))
		}
	}
	return b, nil
}

func (b *blasHandle) close() error {
	if b == nil || b.h == nil {
		return nil
	}
	st := C.ngen_blas_destroy(b.h)
	b.h = nil
	if st != 0 {
		return fmt.Errorf("cublasDestroy: %s", blasStatus(int(st)))
	}
	return nil
}

// gemm issues one lowered call (runtime.LowerGemm), given in row-major
// terms, with the column-major arguments cublasArgs (gemmargs.go) maps it
// to: the same builder that TestCublasArgsMapping checks on the CPU.
func (b *blasHandle) gemm(g runtime.GemmArgs) error {
	c, err := cublasArgs(g)
	if err != nil {
		return err
	}
	st := C.ngen_gemm(b.h, C.int(shimDType(c.DType)), cbool(c.TransA), cbool(c.TransB), C.int(c.M), C.int(c.N), C.int(c.K),
		C.double(c.Alpha), C.ulonglong(c.A), C.int(c.LDA), C.longlong(c.StrideA),
		C.ulonglong(c.B), C.int(c.LDB), C.longlong(c.StrideB), C.double(c.Beta),
		C.ulonglong(c.C), C.int(c.LDC), C.longlong(c.StrideC), C.int(c.Batch), cbool(c.F32Out))
	if st != 0 {
		return fmt.Errorf("%s", blasStatus(int(st)))
	}
	return nil
}

func cbool(v bool) C.int {
	if v {
		return 1
	}
	return 0
}

// blasStatus names a cublasStatus_t.
func blasStatus(st int) string {
	names := map[int]string{1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
		8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
		14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR"}
	if n, ok := names[st]; ok {
		return n
	}
	return fmt.Sprintf("cuBLAS status %d", st)
}

// cuErr turns a CUresult into an error naming the call.
func cuErr(call string, r C.int) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s (%d)", call, C.GoString(C.ngen_cu_name(r)), int(r))
}

// cudaGraph is one instantiated graph.
type cudaGraph struct {
	g C.CUgraph
	e C.CUgraphExec
}

func captureBegin(s cu.Stream) error {
	return cuErr("cuStreamBeginCapture", C.ngen_capture_begin(cStream(s)))
}

// captureEnd ends the capture and instantiates what it recorded.
func captureEnd(s cu.Stream) (*cudaGraph, error) {
	cg := &cudaGraph{}
	if err := cuErr("cuStreamEndCapture", C.ngen_capture_end(cStream(s), &cg.g)); err != nil {
		return nil, err
	}
	if err := cuErr("cuGraphInstantiate", C.ngen_graph_instantiate(&cg.e, cg.g)); err != nil {
		cg.destroy()
		return nil, err
	}
	return cg, nil
}

// captureLast is the graph node of the last call captured on s, or nil.
func captureLast(s cu.Stream) (C.CUgraphNode, error) {
	var n C.CUgraphNode
	err := cuErr("cuStreamGetCaptureInfo", C.ngen_capture_last(cStream(s), &n))
	return n, err
}

func (cg *cudaGraph) launch(s cu.Stream) error {
	return cuErr("cuGraphLaunch", C.ngen_graph_launch(cg.e, cStream(s)))
}

func (cg *cudaGraph) destroy() error {
	err := cuErr("cuGraphDestroy", C.ngen_graph_destroy(cg.g, cg.e))
	cg.g, cg.e = nil, nil
	return err
}

// setKernel gives a captured launch new argument values.
func (cg *cudaGraph) setKernel(node C.CUgraphNode, f cu.Function, grid, block runtime.Dim3, shared int, slots []uint64) error {
	var p *C.ulonglong
	if len(slots) > 0 {
		p = (*C.ulonglong)(unsafe.Pointer(&slots[0]))
	}
	return cuErr("cuGraphExecKernelNodeSetParams", C.ngen_graph_set_kernel(cg.e, node, cFunction(f),
		C.uint(grid.X), C.uint(grid.Y), C.uint(grid.Z), C.uint(block.X), C.uint(block.Y), C.uint(block.Z),
		C.uint(shared), p, C.int(len(slots))))
}
