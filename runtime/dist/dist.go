// Package dist trains one ngen model in several processes at once, on one
// host or many, over MPI (Debian's OpenMPI, through cgo): the
// runtime.Communicator that Session.SetCommunicator takes, as PyTorch's
// DistributedDataParallel takes a process group. Start the processes with
// mpirun (one per device); each calls Init, builds its model, and passes
// the Comm to the session:
//
//	c, err := dist.Init(dist.Options{Timeout: time.Minute})
//	defer c.Finalize()
//	m, _ := mlp.New(dev, mlp.Options{Batch: 64, Seed: 1})
//	err = m.Session().SetCommunicator(c) // rank 0's weights everywhere
//	loss, err := m.Step(x, y)            // x, y: this rank's shard
//
// Every collective is nonblocking MPI completed under a deadline
// (Options.Timeout), so a rank whose peer died or hangs gets an error
// naming itself and the operation instead of waiting for ever; Abort then
// ends the whole job. (When a rank's process dies, mpirun also ends the
// job itself and names the rank.)
//
// Pipeline: DSL → IR → passes → kernels → glue → runtime (the session
// calls this package between backward and the update).
package dist

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/ngen-ml/ngen/runtime"
)

// DefaultTimeout bounds each collective when Options.Timeout is 0. It is
// generous because rank 0 may be slower by a checkpoint or an evaluation.
const DefaultTimeout = 5 * time.Minute

// DefaultBucketBytes is the all-reduce bucket size (PyTorch DDP's
// bucket_cap_mb is 25 MB; smaller buckets cost little on shared memory
// and keep each MPI message moderate).
const DefaultBucketBytes = 4 << 20

// Options configure a communicator.
type Options struct {
	// Timeout bounds every collective (0: DefaultTimeout; negative:
	// none). A collective that has not completed by then returns a
	// *TimeoutError, and the communicator is unusable afterwards.
	Timeout time.Duration
	// BucketBytes is the size of the all-reduce's buckets (0:
	// DefaultBucketBytes).
	BucketBytes int64
}

// Comm is the MPI world communicator (a duplicate of MPI_COMM_WORLD).
type Comm struct {
	rank, size int
	opt        Options
	mu         sync.Mutex // MPI calls one at a time
	broken     error
}

var (
	initOnce sync.Once
	world    *Comm
	initErr  error
)

// Init initialises MPI once per process and returns the world
// communicator. Started without mpirun, it is a group of one.
func Init(opt Options) (*Comm, error) {
	initOnce.Do(func() {
		level, err := mpiInit()
		if err != nil {
			initErr = fmt.Errorf("dist: MPI_Init_thread: %w", err)
			return
		}
		if level < threadMultiple() {
			initErr = fmt.Errorf("dist: the MPI library offers thread level %d, want MPI_THREAD_MULTIPLE (Go runs calls on any thread)", level)
			return
		}
		world = &Comm{rank: mpiRank(), size: mpiSize()}
	})
	if initErr != nil {
		return nil, initErr
	}
	if opt.Timeout == 0 {
		opt.Timeout = DefaultTimeout
	}
	if opt.BucketBytes <= 0 {
		opt.BucketBytes = DefaultBucketBytes
	}
	return &Comm{rank: world.rank, size: world.size, opt: opt}, nil
}

// Rank is this process's rank, 0..Size()-1.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of processes.
func (c *Comm) Size() int { return c.size }

// LocalRank is this process's rank among those on its host: the GPU it
// should use (cuda:LocalRank). OpenMPI's OMPI_COMM_WORLD_LOCAL_RANK when
// set, else computed with MPI_Comm_split_type.
func (c *Comm) LocalRank() (int, error) {
	if s := os.Getenv("OMPI_COMM_WORLD_LOCAL_RANK"); s != "" {
		return strconv.Atoi(s)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return mpiLocalRank()
}

// CUDAAware reports whether the MPI library sums CUDA device memory
// itself (MPIX_Query_cuda_support). Debian's OpenMPI does not.
func (c *Comm) CUDAAware() bool { return mpiCUDAAware() }

// TimeoutError is a collective that did not complete within the timeout:
// another rank died, hung, or failed before joining it.
type TimeoutError struct {
	Rank, Size int
	Op         string
	After      time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("rank %d of %d: %s did not complete within %v: another rank died, hung or failed before joining it",
		e.Rank, e.Size, e.Op, e.After)
}

// do runs one collective under the lock, turning its code into an error.
func (c *Comm) do(op string, f func() int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return fmt.Errorf("rank %d of %d: %s: communicator unusable after: %w", c.rank, c.size, op, c.broken)
	}
	rc := f()
	switch {
	case rc == 0:
		return nil
	case rc == errTimeout:
		c.broken = &TimeoutError{c.rank, c.size, op, c.opt.Timeout}
		return c.broken
	}
	c.broken = fmt.Errorf("rank %d of %d: %s: %w", c.rank, c.size, op, mpiErrorCode(rc))
	return c.broken
}

// Bcast copies root's buf into every rank's buf, which must all have the
// same length.
func (c *Comm) Bcast(buf []byte, root int) error {
	return c.do("broadcast", func() int { return int(mpiBcast(buf, root, c.opt.Timeout)) })
}

// Barrier returns once every rank has called it.
func (c *Comm) Barrier() error {
	return c.do("barrier", func() int { return int(mpiBarrier(c.opt.Timeout)) })
}

// AllreduceF32 replaces x by its elementwise sum over all ranks.
func (c *Comm) AllreduceF32(x []float32) error {
	if len(x) == 0 {
		return nil
	}
	return c.AllreduceSum(unsafe.Pointer(&x[0]), len(x), runtime.F32)
}

// AllreduceF64 replaces x by its elementwise sum over all ranks.
func (c *Comm) AllreduceF64(x []float64) error {
	if len(x) == 0 {
		return nil
	}
	return c.AllreduceSum(unsafe.Pointer(&x[0]), len(x), runtime.F64)
}

// AllreduceSum sums n elements of dt (F32 or F64) of host memory at p in
// place, in buckets of Options.BucketBytes started together.
func (c *Comm) AllreduceSum(p unsafe.Pointer, n int, dt runtime.DType) error {
	if dt != runtime.F32 && dt != runtime.F64 {
		return fmt.Errorf("dist: all-reduce of %v, want f32 or f64", dt)
	}
	bucket := max(c.opt.BucketBytes/int64(dt.Size()), 1)
	return c.do(fmt.Sprintf("all-reduce of %d %v", n, dt), func() int {
		return int(mpiAllreduce(p, int64(n), dt == runtime.F64, bucket, c.opt.Timeout))
	})
}

// AllreduceSumDevice is AllreduceSum on CUDA device memory; only for a
// CUDA-aware library (CUDAAware).
func (c *Comm) AllreduceSumDevice(p runtime.Ptr, n int, dt runtime.DType) error {
	if !c.CUDAAware() {
		return fmt.Errorf("dist: the MPI library is not CUDA-aware: all-reduce through host memory")
	}
	bucket := max(c.opt.BucketBytes/int64(dt.Size()), 1)
	return c.do(fmt.Sprintf("device all-reduce of %d %v", n, dt), func() int {
		return int(mpiAllreduceAt(uintptr(p), int64(n), dt == runtime.F64, bucket, c.opt.Timeout))
	})
}

// Abort prints err naming this rank and ends every process of the job
// (MPI_Abort) with exit status 1. Use it on any error after Init: the
// other ranks would otherwise wait in their next collective until the
// timeout.
func (c *Comm) Abort(err error) {
	fmt.Fprintf(os.Stderr, "ngen dist: rank %d of %d: aborting the job: %v\n", c.rank, c.size, err)
	mpiAbort(1)
	os.Exit(1) // MPI_Abort does not return; this is for the linter and for safety
}

// Finalize ends MPI for this process after a barrier (every rank's last
// collective done). Call it once, at exit, after a successful run.
func (c *Comm) Finalize() error {
	if err := c.Barrier(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return mpiFinalize()
}
