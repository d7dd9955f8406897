package compiler

import (
	"fmt"
	"math"
	"math/bits"

	"github.com/ngen-ml/ngen/compiler/ir"
)

// maxBytes matches runtime.MaxBytes (256 TiB): beyond any device, and small
// enough that the planner's sums of thousands of such sizes fit an int64.
const maxBytes = uint64(1) << 48

// checkBounds rejects sizes the planner would overflow on: a reference
// batch beyond the kernels' 32-bit symbol arguments, a negative memory
// budget, and a tensor whose bytes at the reference batch exceed maxBytes
// (a dimension of 1<<62 once planned 6144 bytes and built). The error
// names the op and its line.
func checkBounds(m *ir.Model, opts Options) error {
	if opts.RefBatch > math.MaxInt32 {
		return fmt.Errorf("batch %d exceeds the kernels' 32-bit range", opts.RefBatch)
	}
	if opts.MemoryBudget < 0 {
		return fmt.Errorf("memory budget %d bytes is negative", opts.MemoryBudget)
	}
	for _, f := range []*ir.Func{m.Forward} {
		if f == nil {
			continue
		}
		for _, v := range f.Values {
			n := uint64(v.DType.Size())
			for _, d := range v.Shape {
				k := uint64(opts.RefBatch)
				if d.Sym == "" {
					k = uint64(d.N)
				}
				hi, lo := bits.Mul64(n, k)
				if d.Sym == "" && (d.N <= 0 || d.N > math.MaxInt32) || hi != 0 || lo > maxBytes {
					return fmt.Errorf("%s (%s): %s at batch %d has a dimension outside 1..%d or more than %d bytes", v.Op, v.Pos, v.Type(), opts.RefBatch, math.MaxInt32, maxBytes)
				}
				n = lo
			}
		}
	}
	return nil
}
