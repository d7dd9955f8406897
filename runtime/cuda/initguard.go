//go:build cuda

package cuda

/*
#cgo LDFLAGS: -ldl -lcuda
#include <cuda.h>
int ngen_cuinit_status(int *called);
*/
import "C"

import (
	"fmt"
	"sync"

	"gorgonia.org/cu"

	"github.com/ngen-ml/ngen/runtime/cuda/probe"
)

// ErrNoDevice is wrapped by the error of every call that needs a device on
// a machine that has none (or no driver). It is probe.ErrNoDevice, so a CLI
// can test for it without the cuda tag.
var ErrNoDevice = probe.ErrNoDevice

var (
	availableOnce sync.Once
	availableErr  error
)

// Available reports why the GPU backend cannot run, or nil when it can. It
// reads the cuInit result that initguard.c recorded during cu's package init,
// so it never calls into an uninitialised driver.
func Available() error {
	availableOnce.Do(func() {
		var called C.int
		r := C.ngen_cuinit_status(&called)
		switch {
		case called == 0:
			// cu's init always runs before ours; this means the linker bound
			// cu's cuInit to libcuda and the guard is not in effect.
			availableErr = fmt.Errorf("cuda: cuInit guard was not linked in (see initguard.c)")
		case r != 0:
			availableErr = fmt.Errorf("%w: cuInit (driver %s): %s", ErrNoDevice, probe.DriverVersionString(cu.Version()), resultText(C.CUresult(r)))
		default:
			n, err := cu.NumDevices()
			if err != nil {
				availableErr = fmt.Errorf("%w: cuDeviceGetCount: %v", ErrNoDevice, err)
			} else if n == 0 {
				availableErr = fmt.Errorf("%w: the driver sees no devices", ErrNoDevice)
			}
		}
	})
	return availableErr
}

// resultText names a CUresult the way the driver does, e.g.
// "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"; cu's own
// names drop the explanation.
func resultText(r C.CUresult) string {
	var name, text *C.char
	if C.cuGetErrorName(r, &name) != C.CUDA_SUCCESS || name == nil {
		return fmt.Sprintf("CUresult %d", int(r))
	}
	s := C.GoString(name)
	if C.cuGetErrorString(r, &text) == C.CUDA_SUCCESS && text != nil {
		s += " (" + C.GoString(text) + ")"
	}
	return s
}
