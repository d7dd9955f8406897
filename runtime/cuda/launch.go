//go:build cuda

package cuda

import (
	"fmt"
	"math"

	"gorgonia.org/cu"

	"github.com/ngen-ml/ngen/runtime"
)

// function is one kernel of a loaded module.
type function struct {
	mod  *loaded
	info runtime.KernelInfo
	fn   cu.Function
	err  error // set when the index was out of range
}

func (f *function) Name() string { return f.info.Name }

// argKindNames are the Go types Launch accepts for each parameter kind.
var argKindNames = map[runtime.ArgKind]string{
	runtime.ArgPtr: "runtime.Ptr",
	runtime.ArgI32: "int32",
	runtime.ArgI64: "int64",
	runtime.ArgU64: "uint64",
	runtime.ArgF32: "float32",
	runtime.ArgF64: "float64",
}

// Launch enqueues f over grid×block threads on the stream and returns
// without waiting; a fault while it runs is reported by the next Sync or
// CopyToHost, naming the kernel.
func (d *Device) Launch(f runtime.Function, grid, block runtime.Dim3, sharedBytes int, args ...runtime.Arg) error {
	fn, ok := f.(*function)
	if !ok || fn == nil {
		return fmt.Errorf("cuda: launch of %T, which no CUDA device loaded", f)
	}
	if fn.err != nil {
		return fn.err
	}
	if fn.mod.dev != d {
		return fmt.Errorf("cuda: launch %s: kernel was loaded on another device", fn.info.Name)
	}
	if err := checkShape(grid, block, sharedBytes); err != nil {
		return fmt.Errorf("cuda: launch %s: %v", fn.info.Name, err)
	}
	params := fn.info.Params
	if len(args) != len(params) {
		return fmt.Errorf("cuda: launch %s: got %d args, want %d", fn.info.Name, len(args), len(params))
	}
	// cu's Launch copies 8 bytes from each kernelParams[i] into C memory;
	// the driver reads only the parameter's own size from its slot, so a
	// 4-byte value sits in the low half (little-endian).
	slots := make([]uint64, len(args))
	for i, a := range args {
		v, err := argBits(params[i], a)
		if err != nil {
			return fmt.Errorf("cuda: launch %s: arg %d: %v", fn.info.Name, i, err)
		}
		slots[i] = v
	}
	// Recorded into the step's CUDA graph, or issued now (graph.go).
	return d.doCall(streamCall{kind: callLaunch, fn: fn, grid: grid, block: block, shared: sharedBytes, slots: slots})
}

// argBits checks a against its declared kind and returns its bytes.
func argBits(kind runtime.ArgKind, a runtime.Arg) (uint64, error) {
	switch v := a.(type) {
	case runtime.Ptr:
		if kind == runtime.ArgPtr {
			return uint64(v), nil
		}
	case int32:
		if kind == runtime.ArgI32 {
			return uint64(uint32(v)), nil
		}
	case int64:
		if kind == runtime.ArgI64 {
			return uint64(v), nil
		}
	case uint64:
		if kind == runtime.ArgU64 {
			return v, nil
		}
	case float32:
		if kind == runtime.ArgF32 {
			return uint64(math.Float32bits(v)), nil
		}
	case float64:
		if kind == runtime.ArgF64 {
			return math.Float64bits(v), nil
		}
	}
	want, known := argKindNames[kind]
	if !known {
		return 0, fmt.Errorf("unknown parameter kind %d", int(kind))
	}
	return 0, fmt.Errorf("want %s, got %T", want, a)
}

// checkShape rejects what the driver would, with a message that says why.
// Limits that depend on the device and kernel (registers, shared memory)
// are left to the driver.
func checkShape(grid, block runtime.Dim3, sharedBytes int) error {
	for _, v := range []int{grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z} {
		if v < 1 || v > math.MaxInt32 {
			return fmt.Errorf("grid %v block %v: every dimension must be in [1, 2^31)", grid, block)
		}
	}
	if grid.Y > 65535 || grid.Z > 65535 {
		return fmt.Errorf("grid %v: Y and Z must be at most 65535", grid)
	}
	if n := block.Count(); n > 1024 {
		return fmt.Errorf("block %v has %d threads, more than 1024", block, n)
	}
	if sharedBytes < 0 || sharedBytes > math.MaxInt32 {
		return fmt.Errorf("dynamic shared memory of %d bytes", sharedBytes)
	}
	return nil
}
