//go:build cuda

package cuda

import (
	"fmt"

	"gorgonia.org/cu"

	"github.com/ngen-ml/ngen/runtime"
)

// gemmScratch is the device memory runtime.LowerGemm's scratch+reduce
// lowering uses: the per-sample products of a summed GEMM and a vector of
// ones per dtype. It grows to the largest GEMM seen and is kept; growing
// drops the CUDA graphs, which hold its old address.
type gemmScratch struct {
	buf      runtime.Ptr
	bytes    int64
	ones     [2]runtime.Ptr // f32, f64
	nones    [2]int
	released bool
}

// gemmLowered issues g as runtime.LowerGemm's calls on the device's
// stream: one cuBLAS call per GEMM, strided-batched over a batch, or two
// for a batch summed into one C that is not one larger GEMM. It runs on
// the device thread.
func (d *Device) gemmLowered(g runtime.GemmArgs) error {
	lo := runtime.LowerGemm(g, 0, 0)
	if lo.Scratch > 0 && g.DType.Size() == 2 {
		// The per-sample products would be rounded to 16 bits before
		// their sum, where the CPU backend sums in f32 and rounds once.
		return fmt.Errorf("cuda: %s: a batch of %s products summed into one C that is not one larger GEMM is not built (docs/AMP.md)", gemmName(g, lo), g.DType)
	}
	if lo.Scratch > 0 {
		s, o, err := d.scratchFor(g.DType, lo.Scratch, lo.Ones)
		if err != nil {
			return fmt.Errorf("cuda: %s: %v", gemmName(g, lo), err)
		}
		lo = runtime.LowerGemm(g, s, o)
	}
	// A fault surfaces at the next Sync, which names the last call.
	d.lastKernel = gemmName(g, lo)
	for i, c := range lo.Calls {
		if err := d.sblas.gemm(c); err != nil {
			return fmt.Errorf("cuda: %s: cuBLAS call %d of %d: %v", d.lastKernel, i+1, len(lo.Calls), err)
		}
	}
	return nil
}

// gemmName describes a GEMM for errors: its shape and how it was issued.
func gemmName(g runtime.GemmArgs, lo runtime.GemmCalls) string {
	return fmt.Sprintf("gemm %s %dx%dx%d batch %d (%s, %d cuBLAS calls)", g.DType, g.M, g.N, g.K, max(g.Batch, 1), lo.How, len(lo.Calls))
}

// scratchFor returns a scratch of at least elems elements of dt and nones
// ones of dt, growing them on the stream.
func (d *Device) scratchFor(dt runtime.DType, elems int64, nones int) (runtime.Ptr, runtime.Ptr, error) {
	s := &d.scratch
	es := int64(dt.Size())
	grew := false
	if elems*es > s.bytes {
		if s.buf != 0 {
			// Stream order makes reuse safe; graphs hold the address.
			d.mem.release(s.buf)
			s.buf, s.bytes = 0, 0
		}
		p, err := d.mem.alloc(elems * es)
		if err != nil {
			return 0, 0, fmt.Errorf("GEMM scratch of %d bytes: %w", elems*es, err)
		}
		s.buf, s.bytes, grew = p, elems*es, true
	}
	i := 0
	if dt == runtime.F64 {
		i = 1
	}
	if nones > s.nones[i] {
		if s.ones[i] != 0 {
			d.mem.release(s.ones[i])
			s.ones[i], s.nones[i] = 0, 0
		}
		p, err := d.mem.alloc(int64(nones) * es)
		if err != nil {
			return 0, 0, fmt.Errorf("GEMM ones vector: %w", err)
		}
		if err := fillOnes(p, dt, nones, d.stream); err != nil {
			d.mem.release(p)
			return 0, 0, err
		}
		s.ones[i], s.nones[i], grew = p, nones, true
	}
	if grew {
		if err := d.gr.drop(); err != nil {
			return 0, 0, err
		}
	}
	return s.buf, s.ones[i], nil
}

// fillOnes writes n ones of dt at p with stream-ordered memsets: 1.0f is
// the word 0x3f800000, and 1.0 the words 0, 0x3ff00000 (little-endian).
func fillOnes(p runtime.Ptr, dt runtime.DType, n int, s cu.Stream) error {
	if dt == runtime.F32 {
		if err := cu.MemsetD32Async(cu.DevicePtr(p), 0x3f800000, int64(n), s); err != nil {
			return fmt.Errorf("filling the GEMM ones vector: %v", err)
		}
		return nil
	}
	if err := cu.MemsetD32Async(cu.DevicePtr(p), 0, int64(2*n), s); err != nil {
		return fmt.Errorf("filling the GEMM ones vector: %v", err)
	}
	if err := cu.MemsetD2D32Async(cu.DevicePtr(p)+4, 8, 0x3ff00000, 1, int64(n), s); err != nil {
		return fmt.Errorf("filling the GEMM ones vector: %v", err)
	}
	return nil
}

// release frees the scratch, on the device thread.
func (s *gemmScratch) release(a *allocator) {
	for _, p := range []runtime.Ptr{s.buf, s.ones[0], s.ones[1]} {
		if p != 0 {
			a.release(p)
		}
	}
	*s = gemmScratch{released: true}
}
