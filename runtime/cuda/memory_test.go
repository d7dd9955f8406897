//go:build cuda

package cuda

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// TestRuntimeMemory: the runtime's memory interfaces on a GPU: an
// out-of-memory error is a *runtime.OutOfMemoryError too, Available and
// MaxBatch see the device's memory, ResetPeak works, and a copy from pinned
// host memory arrives.
func TestRuntimeMemory(t *testing.T) {
	d := newDevice(t)
	huge := d.Info().TotalMem + 1<<30
	_, err := d.Alloc(huge)
	var oom *runtime.OutOfMemoryError
	if !errors.As(err, &oom) || oom.Requested != huge || oom.Available <= 0 || !runtime.IsOutOfMemory(err) {
		t.Fatalf("Alloc(%d) = %v, want a *runtime.OutOfMemoryError", huge, err)
	}
	avail, ok := d.Available()
	if !ok || avail <= 0 || avail > d.Info().TotalMem {
		t.Fatalf("Available %d, %v", avail, ok)
	}
	p, err := d.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	d.Free(p)
	runtime.ResetPeak(d)
	if s := d.MemStats(); s.Peak != s.Allocated {
		t.Fatalf("after ResetPeak: %+v", s)
	}
	h, err := d.AllocHost(16)
	if err != nil {
		t.Fatal(err)
	}
	in := unsafe.Slice((*float32)(h), 4)
	copy(in, []float32{1, 2, 3, 4})
	dst, err := d.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.CopyToDevice(dst, h, 16); err != nil {
		t.Fatal(err)
	}
	if err := d.WaitHost(h); err != nil {
		t.Fatal(err)
	}
	in[0] = 9 // the copy has read the buffer
	if got := download[float32](t, d, dst, 4); got[0] != 1 || got[3] != 4 {
		t.Fatalf("copied %v", got)
	}
	if err := d.FreeHost(h); err != nil {
		t.Fatal(err)
	}
}
