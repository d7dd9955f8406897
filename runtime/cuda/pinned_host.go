//go:build cuda

package cuda

/*
#include <cuda.h>
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/ngen-ml/ngen/runtime"
)

// Pinned host memory for input batches (runtime.HostAllocator), the job of
// DataLoader(pin_memory=True): the training command's prefetcher fills its
// two batch buffers here, and CopyToDevice from them is one asynchronous
// DMA on the stream that reads the buffer itself, with no copy into the
// staging buffers first. The prefetcher fills one buffer while the DMA of
// the other, and the step after it, run; before refilling a buffer it
// waits for the DMA that read it (WaitHost).

type hostBlock struct {
	p       unsafe.Pointer
	n       int64
	done    cu.Event // recorded after the last copy that read the block
	pending bool
}

// hostBlocks is owned by the device thread.
type hostBlocks struct{ list []*hostBlock }

// find is the block holding [p, p+n), or nil.
func (h *hostBlocks) find(p unsafe.Pointer, n int64) *hostBlock {
	for _, b := range h.list {
		if uintptr(p) >= uintptr(b.p) && uintptr(p)+uintptr(n) <= uintptr(b.p)+uintptr(b.n) {
			return b
		}
	}
	return nil
}

func (h *hostBlocks) release() {
	for _, b := range h.list {
		cu.MemFreeHost(b.p)
		cu.DestroyEvent(&b.done)
	}
	h.list = nil
}

// AllocHost returns bytes of page-locked host memory, freed by FreeHost or
// Close.
func (d *Device) AllocHost(bytes int64) (unsafe.Pointer, error) {
	if bytes <= 0 {
		return nil, fmt.Errorf("cuda: host alloc of %d bytes", bytes)
	}
	var p unsafe.Pointer
	err := d.do(func() error {
		if r := C.cuMemHostAlloc(&p, C.size_t(bytes), 0); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuda: cuMemHostAlloc(%d): %s", bytes, resultText(r))
		}
		ev, err := cu.MakeEvent(cu.DisableTiming)
		if err != nil {
			cu.MemFreeHost(p)
			return fmt.Errorf("cuda: cuEventCreate: %v", err)
		}
		d.host.list = append(d.host.list, &hostBlock{p: p, n: bytes, done: ev})
		return nil
	})
	return p, err
}

// FreeHost frees memory from AllocHost once no copy reads it.
func (d *Device) FreeHost(p unsafe.Pointer) error {
	return d.do(func() error {
		for i, b := range d.host.list {
			if b.p != p {
				continue
			}
			var err error
			if b.pending {
				err = b.done.Synchronize()
			}
			cu.MemFreeHost(b.p)
			cu.DestroyEvent(&b.done)
			d.host.list = append(d.host.list[:i], d.host.list[i+1:]...)
			return err
		}
		return fmt.Errorf("cuda: FreeHost of %p, which AllocHost did not return", p)
	})
}

// WaitHost returns once no copy queued on the stream still reads or
// writes the AllocHost block holding p, so the host may overwrite it, or
// read what CopyToHostAsync copied there.
func (d *Device) WaitHost(p unsafe.Pointer) error {
	return d.do(func() error {
		b := d.host.find(p, 0)
		if b == nil || !b.pending {
			return nil
		}
		b.pending = false
		return b.done.Synchronize()
	})
}

// copyFromPinned queues the DMA from a pinned block on stream s (the
// device's, or the copy stream); it runs on the device thread (inside
// CopyToDevice and CopyToDeviceAfter).
func (d *Device) copyFromPinned(s cu.Stream, b *hostBlock, dst runtime.Ptr, src unsafe.Pointer, bytes int64) error {
	if err := cu.MemcpyHtoDAsync(cu.DevicePtr(dst), src, bytes, s); err != nil {
		return fmt.Errorf("cuda: copy of %d pinned bytes to device %#x: %v", bytes, uintptr(dst), err)
	}
	if err := b.done.Record(s); err != nil {
		return fmt.Errorf("cuda: copy to device: %v", err)
	}
	b.pending = true
	return nil
}

// CopyToHostAsync queues the copy of bytes bytes from src into dst, which
// lies in an AllocHost block, behind the work on the stream, and returns
// at once; WaitHost(dst) returns once dst holds them (runtime.AsyncReader:
// the ring a pipelined step's status block is read into one step late).
func (d *Device) CopyToHostAsync(dst unsafe.Pointer, src runtime.Ptr, bytes int64) error {
	ok, err := checkRange("copy to host", bytes, uintptr(dst), uintptr(src))
	if !ok {
		return d.closedOr(err)
	}
	return d.do(func() error {
		b := d.host.find(dst, bytes)
		if b == nil {
			return fmt.Errorf("cuda: asynchronous copy to host memory %p, which AllocHost did not return", dst)
		}
		if err := cu.MemcpyDtoHAsync(dst, cu.DevicePtr(src), bytes, d.stream); err != nil {
			return fmt.Errorf("cuda: copy of %d bytes from device %#x: %v (last kernel launched: %s)", bytes, uintptr(src), err, d.lastKernel)
		}
		if err := b.done.Record(d.stream); err != nil {
			return fmt.Errorf("cuda: copy to host: %v", err)
		}
		b.pending = true
		return nil
	})
}

var (
	_ runtime.HostAllocator = (*Device)(nil)
	_ runtime.AsyncReader   = (*Device)(nil)
)
