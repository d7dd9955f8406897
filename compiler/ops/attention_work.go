package ops

import "github.com/ngen-ml/ngen/compiler/ir"

// AttentionFlops is the arithmetic of one sample of an attention or
// attention_bwd op, for the report's time model (codegen.ModelGPU): its
// per-element Flops cannot say it, since the work grows with Tq·Tk while
// the result grows with Tq. Per visible (query, key) pair of a head
// (causal: the Tk·(Tk+1)/2 pairs of the lower triangle when Tq = Tk):
//   - forward: the score q·k and the weight's share of p·v, 2·dh each;
//   - backward: the recomputed score and dp = dO·v (4·dh) for every item,
//     then dq += ds·k (2·dh) where the source plays q, and dk += ds·q,
//     dv += p·dO (4·dh) where it plays k or v (attentionBwdLoop).
//
// ok is false for any other op.
func AttentionFlops(v *ir.Value) (perSample int64, ok bool) {
	f := v
	switch v.Op {
	case "attention":
	case "attention_bwd":
		f = bwdView(v)
	default:
		return 0, false
	}
	a, err := attentionDims(f)
	if err != nil {
		return 0, false
	}
	pairs := attnPairs(v, a)
	per := int64(4 * a.Dh) // forward
	if v.Op == "attention_bwd" {
		nq, nk := attnItems(v, a, 1)
		q, kv := min(nq, 1), min(nk, 1)
		per = int64(a.Dh) * int64(q*(4+2)+kv*(4+4))
	}
	return int64(a.H) * pairs * per, true
}

// attnPairs is the visible (query, key) pairs of one head of a sample.
func attnPairs(v *ir.Value, a attnDims) int64 {
	if v.Attrs.Str != "causal" {
		return int64(a.Tq) * int64(a.Tk)
	}
	// Key j is visible to query i when j ≤ i.
	var pairs int64
	for i := 0; i < a.Tq; i++ {
		pairs += int64(min(i+1, a.Tk))
	}
	return pairs
}

// The arithmetic a tensor-core attention's lanes do on CUDA cores per
// visible pair, counted from the templates (attention_mma.go): forward,
// the scale, the mask, the running maximum, the exponential (about 4),
// the sum, the dropout factor and the 16-bit rounding; backward, per
// item kind that visits the pair, the exponential, dp·z − D_i, times p,
// the dropout factor and two roundings.
const (
	mmaFwdPairFlops = 10
	mmaBwdPairFlops = 10
)

// AttentionTensorWork splits an attention or attention_bwd op with a
// tensor-core form (attention_mma.go) for the report's time model: per
// sample, its products (AttentionFlops), which run on tensor cores, and
// the arithmetic its lanes do on CUDA cores between them. ok is false for
// any other op, or one without the form.
func AttentionTensorWork(v *ir.Value) (tensor, core int64, ok bool) {
	f, perPair := v, int64(mmaFwdPairFlops)
	switch {
	case v.Op == "attention" && mmaFwdTile(v) > 0:
	case v.Op == "attention_bwd" && mmaBwdOK(v):
		f = bwdView(v)
		a, _ := attentionDims(f)
		nq, nk := attnItems(v, a, 1)
		perPair = int64(mmaBwdPairFlops * (min(nq, 1) + min(nk, 1)))
	default:
		return 0, 0, false
	}
	a, _ := attentionDims(f)
	tensor, _ = AttentionFlops(v)
	return tensor, int64(a.H) * attnPairs(v, a) * perPair, true
}
