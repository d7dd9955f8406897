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

// stageChunk is the size of each pinned staging buffer. Two of them let the
// host copy of one chunk overlap the DMA of the other.
const stageChunk = 4 << 20

// staging holds pinned host buffers for host↔device copies, the job
// pin_memory does in PyTorch: a DMA from pageable memory is synchronous and
// goes through the driver's own bounce buffer, while one from pinned memory
// runs asynchronously on the stream.
//
// gorgonia.org/cu v0.9.6 wraps cuMemFreeHost but not cuMemHostAlloc or
// cuMemAllocHost, so allocation is a direct driver call (docs/GPU.md).
type staging struct {
	bufs [2]pinned
}

type pinned struct {
	host    unsafe.Pointer // C memory from cuMemHostAlloc
	done    cu.Event       // recorded after the last copy that used host
	pending bool           // done has been recorded and not waited for
}

func (s *staging) init() error {
	for i := range s.bufs {
		b := &s.bufs[i]
		if r := C.cuMemHostAlloc(&b.host, stageChunk, 0); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuMemHostAlloc(%d): %s", stageChunk, resultText(r))
		}
		var err error
		if b.done, err = cu.MakeEvent(cu.DisableTiming); err != nil {
			return fmt.Errorf("cuEventCreate: %v", err)
		}
	}
	return nil
}

func (s *staging) release() {
	for i := range s.bufs {
		b := &s.bufs[i]
		if b.host != nil {
			cu.MemFreeHost(b.host)
			b.host = nil
		}
		if b.done != (cu.Event{}) {
			cu.DestroyEvent(&b.done)
		}
	}
}

// wait blocks until the stream is done with b.
func (b *pinned) wait() error {
	if !b.pending {
		return nil
	}
	b.pending = false
	return b.done.Synchronize()
}

func (b *pinned) bytes(n int64) []byte { return unsafe.Slice((*byte)(b.host), n) }

// checkRange rejects negative sizes and null pointers; bytes == 0 is a no-op
// for which checkRange reports false.
func checkRange(op string, bytes int64, ptrs ...uintptr) (bool, error) {
	if bytes < 0 {
		return false, fmt.Errorf("cuda: %s of %d bytes", op, bytes)
	}
	if bytes == 0 {
		return false, nil
	}
	for _, p := range ptrs {
		if p == 0 {
			return false, fmt.Errorf("cuda: %s of %d bytes through a null pointer", op, bytes)
		}
	}
	return true, nil
}

// Memset sets bytes bytes at p to value, in stream order.
func (d *Device) Memset(p runtime.Ptr, value byte, bytes int64) error {
	ok, err := checkRange("memset", bytes, uintptr(p))
	if !ok {
		return d.closedOr(err)
	}
	return d.doCall(streamCall{kind: callMemset, dst: p, value: value, bytes: bytes})
}

// CopyToDevice copies bytes bytes from host memory at src to dst. It returns
// once src has been read into pinned staging memory, possibly before the
// copy to the device has finished; later work on the stream sees the data.
func (d *Device) CopyToDevice(dst runtime.Ptr, src unsafe.Pointer, bytes int64) error {
	ok, err := checkRange("copy to device", bytes, uintptr(dst), uintptr(src))
	if !ok {
		return d.closedOr(err)
	}
	return d.do(func() error { return d.toDevice(d.stream, dst, src, bytes) })
}

// toDevice queues the copy of host memory src to dst on stream s: one
// DMA from an AllocHost block, else through the pinned staging buffers.
// It runs on the device thread.
func (d *Device) toDevice(s cu.Stream, dst runtime.Ptr, src unsafe.Pointer, bytes int64) error {
	if b := d.host.find(src, bytes); b != nil {
		return d.copyFromPinned(s, b, dst, src, bytes) // no staging copy (pinned_host.go)
	}
	for i, off := 0, int64(0); off < bytes; i, off = i+1, off+stageChunk {
		n := min(stageChunk, bytes-off)
		b := &d.stage.bufs[i%2]
		if err := b.wait(); err != nil {
			return fmt.Errorf("cuda: copy to device: %v", err)
		}
		copy(b.bytes(n), unsafe.Slice((*byte)(unsafe.Add(src, off)), n))
		if err := cu.MemcpyHtoDAsync(cu.DevicePtr(dst)+cu.DevicePtr(off), b.host, n, s); err != nil {
			return fmt.Errorf("cuda: copy of %d bytes to device %#x: %v", n, uintptr(dst)+uintptr(off), err)
		}
		if err := b.done.Record(s); err != nil {
			return fmt.Errorf("cuda: copy to device: %v", err)
		}
		b.pending = true
	}
	return nil
}

// CopyToHost copies bytes bytes from src to host memory at dst, after all
// earlier work on the stream, and returns when dst holds them.
func (d *Device) CopyToHost(dst unsafe.Pointer, src runtime.Ptr, bytes int64) error {
	ok, err := checkRange("copy to host", bytes, uintptr(dst), uintptr(src))
	if !ok {
		return d.closedOr(err)
	}
	return d.do(func() error {
		// While chunk i is in flight, chunk i-1 is copied out of the other
		// buffer.
		var prev *pinned
		var prevOff, prevN int64
		drain := func() error {
			if prev == nil {
				return nil
			}
			if err := prev.wait(); err != nil {
				return fmt.Errorf("cuda: copy to host: %v (last kernel launched: %s)", err, d.lastKernel)
			}
			copy(unsafe.Slice((*byte)(unsafe.Add(dst, prevOff)), prevN), prev.bytes(prevN))
			return nil
		}
		for i, off := 0, int64(0); off < bytes; i, off = i+1, off+stageChunk {
			n := min(stageChunk, bytes-off)
			b := &d.stage.bufs[i%2]
			if err := b.wait(); err != nil {
				return fmt.Errorf("cuda: copy to host: %v", err)
			}
			if err := cu.MemcpyDtoHAsync(b.host, cu.DevicePtr(src)+cu.DevicePtr(off), n, d.stream); err != nil {
				return fmt.Errorf("cuda: copy of %d bytes from device %#x: %v", n, uintptr(src)+uintptr(off), err)
			}
			if err := b.done.Record(d.stream); err != nil {
				return fmt.Errorf("cuda: copy to host: %v", err)
			}
			b.pending = true
			if err := drain(); err != nil {
				return err
			}
			prev, prevOff, prevN = b, off, n
		}
		return drain()
	})
}

// CopyDevice copies bytes bytes from src to dst in stream order; the ranges
// may overlap, as with memmove.
func (d *Device) CopyDevice(dst, src runtime.Ptr, bytes int64) error {
	ok, err := checkRange("device copy", bytes, uintptr(dst), uintptr(src))
	if !ok || dst == src {
		return d.closedOr(err)
	}
	if !overlaps(dst, src, bytes) {
		return d.doCall(streamCall{kind: callCopy, dst: dst, src: src, bytes: bytes})
	}
	return d.do(func() error {
		// cuMemcpyDtoD leaves overlapping ranges undefined: go through a
		// scratch block from the cache.
		if overlaps(dst, src, bytes) {
			tmp, err := d.mem.alloc(bytes)
			if err != nil {
				return err
			}
			defer d.mem.release(tmp)
			if err := d.copyDtoD(tmp, src, bytes); err != nil {
				return err
			}
			src = tmp
		}
		return d.copyDtoD(dst, src, bytes)
	})
}

func overlaps(a, b runtime.Ptr, n int64) bool {
	return uintptr(a) < uintptr(b)+uintptr(n) && uintptr(b) < uintptr(a)+uintptr(n)
}

func (d *Device) copyDtoD(dst, src runtime.Ptr, bytes int64) error {
	if err := cu.MemcpyDtoDAsync(cu.DevicePtr(dst), cu.DevicePtr(src), bytes, d.stream); err != nil {
		return fmt.Errorf("cuda: device copy of %d bytes from %#x to %#x: %v", bytes, uintptr(src), uintptr(dst), err)
	}
	return nil
}

// closedOr returns err, or errClosed when err is nil and the device is
// closed, so no-op calls on a closed device still fail as the CPU backend's
// do.
func (d *Device) closedOr(err error) error {
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return errClosed
	}
	return nil
}
