package runtime

import (
	"fmt"
	"math"
	"math/bits"
)

// MaxBytes bounds every buffer and every sum of buffers a session sizes:
// 256 TiB, beyond any device, and small enough that the layout's sums and
// alignments of thousands of such sizes cannot overflow an int64.
const MaxBytes = int64(1) << 48

// EvalChecked is Eval that reports overflow instead of wrapping.
func (s Size) EvalChecked(env map[string]int) (int64, bool) {
	if s.Mul < 0 {
		return 0, false
	}
	n := uint64(s.Mul)
	for _, y := range s.Syms {
		v := env[y]
		if v < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(v))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}

// checkSizes rejects symbol bounds whose buffers cannot exist: a bound the
// kernels' 32-bit symbol arguments cannot hold, a buffer whose byte size
// overflows or exceeds MaxBytes, or storage whose total does. After it
// passes, every size computation of the layout fits an int64.
func checkSizes(p *Plan, env map[string]int) error {
	for y, n := range env {
		if n > math.MaxInt32 {
			return fmt.Errorf("%s: bound %d for %s exceeds the kernels' 32-bit range", p.Model, n, y)
		}
	}
	var total int64
	for i := range p.Buffers {
		b := &p.Buffers[i]
		n, ok := b.Elems.EvalChecked(env)
		if ok {
			var hi, lo uint64
			hi, lo = bits.Mul64(uint64(n), uint64(b.DType.Size()))
			ok = hi == 0 && lo <= uint64(MaxBytes)
			n = int64(lo)
		}
		if !ok {
			return fmt.Errorf("%s: %s %s (%s elements at batch %d) exceeds %d bytes", p.Model, b.Role, b.Name, b.Elems, env["B"], MaxBytes)
		}
		if b.Placement != Alias {
			if total += alignUp(n); total > MaxBytes {
				return fmt.Errorf("%s: storage at batch %d exceeds %d bytes", p.Model, env["B"], MaxBytes)
			}
		}
	}
	return nil
}
