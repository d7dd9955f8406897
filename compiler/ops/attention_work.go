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
	pairs := int64(a.Tq) * int64(a.Tk)
	if v.Attrs.Str == "causal" {
		// Key j is visible to query i when j ≤ i.
		pairs = 0
		for i := 0; i < a.Tq; i++ {
			pairs += int64(min(i+1, a.Tk))
		}
	}
	per := int64(4 * a.Dh) // forward
	if v.Op == "attention_bwd" {
		nq, nk := attnItems(v, a, 1)
		q, kv := min(nq, 1), min(nk, 1)
		per = int64(a.Dh) * int64(q*(4+2)+kv*(4+4))
	}
	return int64(a.H) * pairs * per, true
}
