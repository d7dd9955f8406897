package runtime

import "math"

// GemmCalls is how a GPU backend issues one GemmArgs: the library calls in
// order, each a plain GEMM (Batch 1) or one strided-batched GEMM (Batch >
// 1, StrideC > 0, outputs disjoint). It is pure so that the CPU tests can
// run the calls through runtime/cpu's Gemm against the original, and so
// that `ngen report` counts device calls exactly as runtime/cuda issues
// them.
type GemmCalls struct {
	Calls []GemmArgs
	// Scratch and Ones are the element counts of the scratch matrix and
	// the all-ones vector (of the GEMM's dtype) the calls read or write at
	// the pointers LowerGemm was given; 0 when unused.
	Scratch int64
	Ones    int
	// How names the lowering, for tests and reports: "one", "strided",
	// "m-concat", "k-concat", "scratch+reduce" or "loop".
	How string
}

// LowerGemm turns g, whose leading dimensions are filled in (as
// runtime/cuda's and runtime/cpu's Gemm normalise them), into device calls
// with the semantics of runtime/cpu's Gemm: Batch products applied in
// order. scratch and ones are device buffers of at least Scratch and Ones
// elements, filled with ones; pass 0 to learn the sizes first.
//
//   - Batch 1: one GEMM.
//   - Disjoint outputs (StrideC > 0): one strided-batched GEMM, or one
//     GEMM of Batch·M rows when A's matrices are stacked rows of one
//     matrix, B is shared and C's matrices are stacked too ("m-concat").
//   - One C summed over the batch (StrideC 0, Beta 1, a convolution's
//     weight gradient): when op(A)'s matrices lie side by side and op(B)'s
//     stacked in one strided matrix each, the sum is exactly one GEMM with
//     K' = Batch·K ("k-concat"). Otherwise one strided-batched GEMM writes
//     every product to the scratch and a second GEMM, ones(1×Batch) times
//     the scratch seen as Batch × (M·N), adds them into C
//     ("scratch+reduce").
//   - Anything else (overlapping outputs, StrideC 0 with Beta ≠ 1, whose
//     sequential meaning is not a sum): one GEMM per batch entry ("loop").
func LowerGemm(g GemmArgs, scratch, ones Ptr) GemmCalls {
	if g.M == 0 || g.N == 0 {
		return GemmCalls{How: "one"}
	}
	g.Batch = max(g.Batch, 1)
	if g.Batch == 1 {
		g.StrideA, g.StrideB, g.StrideC = 0, 0, 0
		return GemmCalls{Calls: []GemmArgs{g}, How: "one"}
	}
	if g.StrideC > 0 {
		if g.StrideC < (g.M-1)*g.LDC+g.N {
			return loopGemm(g)
		}
		if one, ok := MConcat(g); ok {
			return GemmCalls{Calls: []GemmArgs{one}, How: "m-concat"}
		}
		return GemmCalls{Calls: []GemmArgs{g}, How: "strided"}
	}
	if g.Beta != 1 {
		return loopGemm(g)
	}
	if g.K == 0 {
		one := g
		one.Batch, one.StrideA, one.StrideB = 1, 0, 0
		return GemmCalls{Calls: []GemmArgs{one}, How: "one"}
	}
	if one, ok := KConcatGemm(g); ok {
		return GemmCalls{Calls: []GemmArgs{one}, How: "k-concat"}
	}
	mn := g.M * g.N
	prod := g
	prod.C, prod.LDC, prod.StrideC, prod.Beta = scratch, g.N, mn, 0
	red := GemmArgs{DType: g.DType, M: 1, N: mn, K: g.Batch, Alpha: 1, Beta: g.Beta,
		A: ones, LDA: g.Batch, B: scratch, LDB: mn, C: g.C, LDC: mn, Batch: 1}
	if g.LDC != g.N {
		// C's rows are not contiguous: one reduction per row of C, as
		// one strided-batched call over the rows.
		red.N, red.LDB, red.LDC = g.N, mn, g.N
		red.Batch, red.StrideB, red.StrideC = g.M, g.N, g.LDC
	}
	return GemmCalls{Calls: []GemmArgs{prod, red}, Scratch: int64(g.Batch) * int64(mn), Ones: g.Batch, How: "scratch+reduce"}
}

// MConcat reports whether a batch with disjoint outputs is one GEMM of
// Batch·M rows, and returns that GEMM: B shared (StrideB 0), and the
// matrices of A (not transposed) and of C stacked row after row
// (StrideA = M·LDA, StrideC = M·LDC), as a Linear layer over a [B, T, E]
// input is planned. Each row's sum runs over the same K in either form.
// Both backends use it: one library call packs B once rather than Batch
// times, and blocks the rows as it likes. Batch·M must fit the libraries'
// int.
func MConcat(g GemmArgs) (GemmArgs, bool) {
	if g.Batch < 2 || g.StrideC <= 0 || g.TransA || g.StrideB != 0 {
		return g, false
	}
	if g.StrideA != g.M*g.LDA || g.StrideC != g.M*g.LDC || int64(g.Batch)*int64(g.M) > math.MaxInt32 {
		return g, false
	}
	one := g
	one.M, one.Batch, one.StrideA, one.StrideC = g.Batch*g.M, 1, 0, 0
	return one, true
}

// KConcat reports whether a batch summed into one C is one GEMM with
// K' = Batch·K: op(A_b) must be the columns [bK, (b+1)K) of one M×(Batch·K)
// matrix and op(B_b) the rows [bK, (b+1)K) of one (Batch·K)×N matrix, both
// with the batch's leading dimensions. Then Σ_b op(A_b)·op(B_b) is that
// product, exactly.
func KConcat(g GemmArgs) bool {
	bk := g.Batch * g.K
	var aOK, bOK bool
	if g.TransA { // A_b is K×M: stacked rows
		aOK = g.StrideA == g.K*g.LDA
	} else { // A_b is M×K: side by side in rows of LDA ≥ Batch·K
		aOK = g.StrideA == g.K && g.LDA >= bk
	}
	if g.TransB { // B_b is N×K: side by side
		bOK = g.StrideB == g.K && g.LDB >= bk
	} else { // B_b is K×N: stacked rows
		bOK = g.StrideB == g.K*g.LDB
	}
	return aOK && bOK
}

// KConcatGemm returns the one GEMM with K' = Batch·K that a batch summed
// into one C is (StrideC 0, Beta 1, KConcat's layout), as a weight
// gradient over [B, T, ·] activations is planned: Σ_b dY_bᵀ·X_b is dYᵀ·X
// over all B·T rows. Both backends use it: the GPU as one library call
// ("k-concat"), the CPU rather than Batch calls that each read and write
// all of C. The sum then runs in the library's order over B·T, not batch
// entry by batch entry. Batch·K must fit the libraries' int.
func KConcatGemm(g GemmArgs) (GemmArgs, bool) {
	if g.Batch < 2 || g.StrideC != 0 || g.Beta != 1 || g.K == 0 || int64(g.Batch)*int64(g.K) > math.MaxInt32 || !KConcat(g) {
		return g, false
	}
	one := g
	one.K, one.Batch, one.StrideA, one.StrideB = g.Batch*g.K, 1, 0, 0
	return one, true
}

func loopGemm(g GemmArgs) GemmCalls {
	es := Ptr(g.DType.Size())
	out := GemmCalls{How: "loop"}
	for i := range g.Batch {
		one := g
		one.A += Ptr(i*g.StrideA) * es
		one.B += Ptr(i*g.StrideB) * es
		one.C += Ptr(i*g.StrideC) * Ptr(g.CSize())
		one.Batch, one.StrideA, one.StrideB, one.StrideC = 1, 0, 0, 0
		out.Calls = append(out.Calls, one)
	}
	return out
}

// ArgsFor is the GemmArgs a session issues for this step (Args) with the
// types of plan buffers bufs: the operands' type, and F32Out for an f32
// C of 16-bit operands.
func (g Gemm) ArgsFor(env map[string]int, bufs []Buffer, ptrs []Ptr) GemmArgs {
	dt := bufs[g.A].DType
	ga := g.Args(env, dt, ptrs)
	ga.F32Out = (dt == BF16 || dt == F16) && bufs[g.C].DType == F32
	return ga
}

// Args is the GemmArgs a session issues for this step at the symbol
// bindings env, for operands of type dt: operands packed, pointers from
// ptrs (indexed by buffer; nil leaves them 0, as `ngen report` does).
func (g Gemm) Args(env map[string]int, dt DType, ptrs []Ptr) GemmArgs {
	m, n, k := int(g.M.Eval(env)), int(g.N.Eval(env)), int(g.K.Eval(env))
	lda, ldb := k, n
	if g.TransA {
		lda = m
	}
	if g.TransB {
		ldb = k
	}
	ga := GemmArgs{DType: dt, TransA: Transpose(g.TransA), TransB: Transpose(g.TransB),
		M: m, N: n, K: k, Alpha: g.Alpha, Beta: g.Beta, LDA: lda, LDB: ldb, LDC: n,
		Batch: int(g.Batch.Eval(env)), StrideC: m * n}
	if ptrs != nil {
		ga.A, ga.B, ga.C = ptrs[g.A], ptrs[g.B], ptrs[g.C]
	}
	if g.BatchA {
		ga.StrideA = m * k
	}
	if g.BatchB {
		ga.StrideB = k * n
	}
	if g.SumBatch {
		ga.StrideC, ga.Beta = 0, 1 // C was zeroed by the preceding memset step
	}
	return ga
}
