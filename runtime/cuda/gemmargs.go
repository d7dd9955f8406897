package cuda

// This file has no build tag: the mapping from ngen's row-major GEMM to
// cuBLAS's column-major arguments is pure arithmetic, so its test
// (gemmargs_test.go) runs on every machine, against the row-major
// reference, where the GEMMs themselves need a GPU.

import (
	"fmt"
	"math"

	"github.com/ngen-ml/ngen/runtime"
)

// cublasCall is a batch of cuBLAS gemm calls (cublas{S,D}gemm, or one
// strided-batched call) in cuBLAS's own column-major terms: entry i
// computes C_i = Alpha·op(A_i)·op(B_i) + Beta·C_i, op(A_i) M×K, op(B_i)
// K×N, C_i M×N, column-major with leading dimensions LDA, LDB, LDC, where
// X_i = X + i·StrideX elements. The entries run in order, so a StrideC of
// 0 with Beta 1 sums the batch into one C.
type cublasCall struct {
	DType          runtime.DType
	TransA, TransB bool // cuBLAS's transa and transb
	M, N, K        int
	Alpha, Beta    float64
	A              runtime.Ptr
	LDA            int
	B              runtime.Ptr
	LDB            int
	C              runtime.Ptr
	LDC            int
	Batch          int
	StrideA        int
	StrideB        int
	StrideC        int
	F32Out         bool // C is f32, A and B DType's 16 bits (cublasGemmEx's Ctype CUDA_R_32F)
}

// cublasArgs maps a row-major runtime.GemmArgs (runtime/cpu's semantics)
// to cuBLAS's column-major arguments.
//
// A row-major M×N matrix with leading dimension ld is the same memory as a
// column-major N×M one with the same ld. So row-major C = op(A) op(B) is
// column-major Cᵀ = op(B)ᵀ op(A)ᵀ: cuBLAS gets the operands (and M, N, and
// the leading dimensions and batch strides with them) swapped, and each
// operand keeps its own transpose flag.
func cublasArgs(g runtime.GemmArgs) (cublasCall, error) {
	if err := normalizeGemm(&g); err != nil {
		return cublasCall{}, err
	}
	if g.K == 0 {
		// cuBLAS reads neither A nor B, but cu/blas takes &a[0].
		g.A, g.B = g.C, g.C
	}
	return cublasCall{
		DType:  g.DType,
		TransA: bool(g.TransB), TransB: bool(g.TransA),
		M: g.N, N: g.M, K: g.K,
		Alpha: g.Alpha, Beta: g.Beta,
		A: g.B, LDA: g.LDB,
		B: g.A, LDB: g.LDA,
		C: g.C, LDC: g.LDC,
		Batch:   g.Batch,
		StrideA: g.StrideB, StrideB: g.StrideA, StrideC: g.StrideC,
		F32Out: g.F32Out,
	}, nil
}

// entry returns the addresses of batch entry i's matrices.
func (c cublasCall) entry(i int) (a, b, cc uintptr) {
	es, cs := uintptr(c.DType.Size()), uintptr(c.DType.Size())
	if c.F32Out {
		cs = 4
	}
	return uintptr(c.A) + uintptr(i*c.StrideA)*es, uintptr(c.B) + uintptr(i*c.StrideB)*es, uintptr(c.C) + uintptr(i*c.StrideC)*cs
}

// normalizeGemm fills in defaults and checks what cuBLAS would otherwise
// reject with a bare status code (or cu/blas with a panic).
func normalizeGemm(g *runtime.GemmArgs) error {
	if shimDType(g.DType) < 0 {
		return fmt.Errorf("dtype %s not supported, want f32, f64, bf16 or f16", g.DType)
	}
	if g.F32Out && shimDType(g.DType) < 2 {
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
			return fmt.Errorf("%s = %d exceeds cuBLAS's int", ld.name, *ld.v)
		}
	}
	if g.M > math.MaxInt32 || g.N > math.MaxInt32 || g.K > math.MaxInt32 {
		return fmt.Errorf("size exceeds cuBLAS's int")
	}
	if g.M > 0 && g.N > 0 && (g.C == 0 || (g.K > 0 && (g.A == 0 || g.B == 0))) {
		return fmt.Errorf("null matrix pointer")
	}
	return nil
}

// shimDType is ngen_gemm's code for dt (shim.go): 0 f32, 1 f64, 2 bf16,
// 3 f16 (cublasGemmEx with f32 accumulation), or -1.
func shimDType(dt runtime.DType) int {
	switch dt {
	case runtime.F32:
		return 0
	case runtime.F64:
		return 1
	case runtime.BF16:
		return 2
	case runtime.F16:
		return 3
	}
	return -1
}
