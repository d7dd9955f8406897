// Package runtime is what generated ngen packages run on: the Device
// interface that backends implement (runtime/cpu executes the generated CUDA C
// on the host, runtime/cuda on an NVIDIA GPU) and the plan executor that the
// generated glue hands its launch table to.
//
// Pipeline: DSL → IR → passes → kernels → glue → runtime (this package).
package runtime

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"unsafe"
)

// Ptr is a device address. On the CPU backend it is a host address.
type Ptr uintptr

// Dim3 is a CUDA launch dimension.
type Dim3 struct{ X, Y, Z int }

// Count is X*Y*Z.
func (d Dim3) Count() int { return d.X * d.Y * d.Z }

// DType names an element type on the device.
type DType int

const (
	F32 DType = iota
	F64
	I32
	BF16 // bfloat16 (mixed precision's storage type)
	F16  // IEEE binary16
)

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case F64:
		return 8
	case BF16, F16:
		return 2
	default:
		return 4
	}
}

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case F64:
		return "f64"
	case I32:
		return "i32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("dtype(%d)", int(d))
}

// KernelInfo is the launch description the code generator emits once per
// kernel. Backends read it; they never recompute it.
type KernelInfo struct {
	Name string `json:",omitzero"`
	// Sync is true when the kernel uses __syncthreads or warp shuffles, so
	// the CPU backend must run a block's threads as cooperative fibers.
	Sync bool `json:",omitzero"`
	// GridStride is true when the kernel is one NGEN_GRID_STRIDE loop of
	// independent iterations, so any partition of the index range gives
	// the same result: the CPU backend runs each worker's share of the
	// grid as one contiguous span (NGEN_RUN_SPAN). With Sync, only the
	// kernel's CPU emulation form is such a loop (cross-entropy's warp per
	// row): the GPU forms run it with its barriers.
	GridStride bool `json:",omitzero"`
	// SoloBlocks is true when the kernel computes the same values with
	// blocks of one thread as with the block it is launched with (its
	// loops stride by blockDim.x, and a one-thread block skips the
	// block-wide combination): the CPU backend launches it so, and each
	// block runs as one fiber that walks its share in vectorisable loops
	// instead of hundreds of fibers taking a few elements each.
	SoloBlocks bool `json:",omitzero"`
	// Steps, when set, makes the kernel stepped: its CUDA form computes
	// one step of a loop (a recurrence's time step) a launch, and runs
	// Steps launches in a row, each passed its index (0, 1, …) in the
	// last parameter (the plan's argument there names LaunchScalar). The
	// launch boundary is the barrier between steps. Its Host and
	// Baseline forms run the whole loop in one launch and ignore the
	// index; a device that runs them says so (WholeLoops) and the
	// session launches them once. SoloBlocks speaks of those forms only.
	Steps int `json:",omitzero"`
	// Params lists the kernel's parameter kinds in argument order.
	Params []ArgKind `json:",omitzero"`
	// Run is how the CPU backend runs the kernel's CUDA form (the .cu as
	// written, under cpu.Options.GPUBlocks and wherever Host is nil).
	Run RunMode `json:",omitzero"`
	// Host, when set, is the form of its own that the host target
	// rendered for the CPU backend, which runs it in place of the CUDA
	// form by default (a GEMM per time step for a recurrence, a row at a
	// time for cross-entropy). Baseline, when set, is the form it runs
	// under cpu.Options.Baseline (nil: the CUDA form); it keeps the CUDA
	// form's arithmetic. Codegen sets both where it lowers the kernel, and
	// the host glue's launcher follows them.
	Host, Baseline *HostForm `json:",omitzero"`
}

// LaunchScalar is the name a stepped kernel's (KernelInfo.Steps) last
// argument carries in the plan: the launch's index, which the session
// sets per launch.
const LaunchScalar = "launch"

// WholeLoops is a device that runs some stepped kernels (KernelInfo.Steps)
// in a form of its own that loops over every step in one launch: the CPU
// backend's host forms of a recurrence. The session launches such a
// kernel once on it, with index 0; on any other device (the GPU) Steps
// times.
type WholeLoops interface {
	RunsWhole(k *KernelInfo) bool
}

// HostForm is a form of a kernel that only the host glue holds: the
// function Name+Suffix, run as Run says.
type HostForm struct {
	Suffix string  `json:",omitzero"`
	Run    RunMode `json:",omitzero"`
}

// OwnStack reports whether the form runs on the worker thread's own stack
// (it calls a library that wants more stack than a fiber has).
func (f *HostForm) OwnStack() bool { return f != nil && f.Run == RunOwnStack }

// RunMode is how the CPU backend runs one form of a kernel.
type RunMode int

const (
	// RunThreads calls the kernel once per thread of each block, in a
	// plain loop: it has no barriers.
	RunThreads RunMode = iota
	// RunSpan calls it once per worker: the form is a grid-stride loop
	// of independent iterations, and each worker walks a contiguous span.
	RunSpan
	// RunFibers runs each block's threads as fibers that switch at
	// barriers and warp shuffles.
	RunFibers
	// RunOwnStack runs one-thread blocks as plain calls on the worker's
	// own stack.
	RunOwnStack
)

var runModeNames = [...]string{"threads", "span", "fibers", "own stack"}

func (m RunMode) String() string {
	if m >= 0 && int(m) < len(runModeNames) {
		return runModeNames[m]
	}
	return fmt.Sprintf("RunMode(%d)", int(m))
}

// ArgKind is the C type of one kernel parameter.
type ArgKind int

const (
	ArgPtr ArgKind = iota // any T* (8 bytes)
	ArgI32                // int
	ArgI64                // long long
	ArgU64                // unsigned long long
	ArgF32                // float
	ArgF64                // double
)

// Module is the compiled kernels of one generated package, in the forms the
// backends need. A backend uses the fields it understands.
type Module struct {
	Name   string // sanitised model name
	Source string // the generated .cu
	PTX    string // compute_80 PTX, when nvcc was on PATH at generation
	Fatbin []byte // sm_80/sm_90 fatbin, when nvcc was on PATH
	// FatbinGz is the fatbin gzip-compressed, as generated packages
	// commit and embed it (a quarter of its size); FatbinImage gives it
	// back. At most one of Fatbin and FatbinGz is set.
	FatbinGz []byte
	Kernels  []KernelInfo // index i is kernel i
	// CPUEntry is the address of the C function
	//   int ngen_cpu_entry(int kernel, const ngen_launch *l)
	// compiled into the generated package by cgo (see runtime/cpu). Nil
	// when the package was built without cgo.
	CPUEntry unsafe.Pointer
}

// Function is a loaded kernel.
type Function interface {
	Name() string
}

// Loaded is a module loaded on a device.
type Loaded interface {
	// Function returns kernel i of the module.
	Function(i int) Function
}

// Arg is one kernel argument: a Ptr, int32, int64, uint64, float32 or float64.
type Arg = any

// Transpose flags for Gemm.
type Transpose bool

const (
	NoTrans Transpose = false
	Trans   Transpose = true
)

// GemmArgs describes a row-major C = alpha*op(A)*op(B) + beta*C, with
// op(A) M×K, op(B) K×N, C M×N, repeated Batch times with the given element
// strides between consecutive matrices (0 means the operand is shared).
type GemmArgs struct {
	DType            DType
	TransA, TransB   Transpose
	M, N, K          int
	Alpha, Beta      float64
	A                Ptr
	LDA              int
	B                Ptr
	LDB              int
	C                Ptr
	LDC              int
	Batch            int
	StrideA, StrideB int
	StrideC          int
	// F32Out says C is f32 while A and B are DType's 16 bits: the
	// products accumulate in f32 and C keeps them unrounded (a weight
	// gradient written straight into the f32 gradient,
	// compiler/f32_weight_grads.go). Not with a batch summed into one C
	// that is not one larger product.
	F32Out bool
}

// CSize is the size of one element of C.
func (g GemmArgs) CSize() int {
	if g.F32Out {
		return 4
	}
	return g.DType.Size()
}

// MemStats mirrors torch.cuda.memory_allocated / memory_reserved /
// max_memory_allocated.
type MemStats struct {
	Allocated int64
	Reserved  int64
	Peak      int64
}

// Device is what generated code runs on. Every call is ordered on the
// device's single stream; Sync waits for all of them.
type Device interface {
	Name() string
	Load(m *Module) (Loaded, error)
	Alloc(bytes int64) (Ptr, error)
	Free(p Ptr) error
	Memset(p Ptr, value byte, bytes int64) error
	CopyToDevice(dst Ptr, src unsafe.Pointer, bytes int64) error
	CopyToHost(dst unsafe.Pointer, src Ptr, bytes int64) error
	CopyDevice(dst, src Ptr, bytes int64) error
	// Launch reads args before it returns and keeps no reference to the
	// slice: the session reuses it for the next launch (as cuLaunchKernel
	// copies kernelParams, also while a graph is captured).
	Launch(f Function, grid, block Dim3, sharedBytes int, args ...Arg) error
	Gemm(g GemmArgs) error
	Sync() error
	MemStats() MemStats
	Close() error
}

// FatbinImage is the module's fatbin (Fatbin, or FatbinGz decompressed),
// nil when it has none.
func (m *Module) FatbinImage() ([]byte, error) {
	if len(m.Fatbin) > 0 || len(m.FatbinGz) == 0 {
		return m.Fatbin, nil
	}
	r, err := gzip.NewReader(bytes.NewReader(m.FatbinGz))
	if err != nil {
		return nil, fmt.Errorf("%s: the compressed fatbin: %w", m.Name, err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: the compressed fatbin: %w", m.Name, err)
	}
	return b, nil
}
