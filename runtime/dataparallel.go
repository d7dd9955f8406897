package runtime

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"
)

// Data parallelism, as PyTorch's DistributedDataParallel: one process per
// device, each with a replica of the model, trains on its own shard of
// every global batch; between backward and the update the gradients are
// averaged over the processes, so every replica applies the same update
// and stays identical. The session needs only a Communicator (runtime/dist
// is one on MPI): Run("step") is then forward and backward on the local
// shard, the all-reduce of the flat gradient vector, and the same fused
// optimizer update. There is no second code path: a session without a
// communicator is a group of one.
//
// The all-reduce runs after backward, over the whole vector in buckets
// (runtime/dist starts them all at once), not overlapped with backward:
// the gradient kernels write one flat vector in an order the planner
// chose, and a bucket's readiness is not tracked. Its cost is
// Session.ReduceTime; docs/PERF.md says when overlapping would pay.
//
// Every rank must take part in every update, and the ranks agree on its
// verdict before it (agreeVerdict): each rank's guard judged its own
// loss and gradients, and one small all-reduce tells every rank whether
// any rank's step failed or was not finite; then every rank commits or
// none does. Under a loss scaler a non-finite loss or gradient on any
// rank, or a sum over the ranks that overflows (the update check fails
// it on every rank alike), is a step every rank skips, backing its scale
// off alike (PyTorch's DDP all-reduces the
// scaled gradients, so every rank's GradScaler sees the same inf);
// otherwise every rank returns an error. With accumulation a micro-batch
// that fails its checks (a label out of range, a non-finite loss
// without a scaler) is not counted on its rank alone, so the ranks'
// updates no longer line up: treat any error as fatal to the job
// (cmd/train aborts every rank; otherwise the others time out).

// Communicator joins the sessions of one model in several processes.
// Every collective must be called by all ranks in the same order.
type Communicator interface {
	Rank() int
	Size() int
	// Bcast copies root's buf into every other rank's buf (same length).
	Bcast(buf []byte, root int) error
	// AllreduceSum replaces n elements of dt (F32 or F64) in host memory
	// at p by their sum over all ranks.
	AllreduceSum(p unsafe.Pointer, n int, dt DType) error
}

// DeviceAllreducer is a Communicator that can sum device memory of a CUDA
// device directly (CUDA-aware MPI), skipping the copies through the host.
type DeviceAllreducer interface {
	CUDAAware() bool
	AllreduceSumDevice(p Ptr, n int, dt DType) error
}

// dataParallel is the session's data-parallel state.
type dataParallel struct {
	comm   Communicator
	host   unsafe.Pointer // staging for the gradient vector
	hostGo []byte         // its Go memory, when the device has no pinned memory
	pinned bool
	spent  time.Duration // in all-reduces, since SetCommunicator
}

// SetCommunicator makes the session one replica of a data-parallel group:
// it checks that every rank runs the same model with the same per-rank
// batch and accumulation, copies rank 0's parameters, optimizer state,
// step count, learning rate and dropout seed to every rank (so replicas
// start identical whatever their seeds), and from then on averages the
// gradients over the ranks before every update. All ranks must call it.
// Batch norm keeps per-rank statistics (no SyncBatchNorm), as PyTorch
// DDP does. A nil c makes the session train alone again.
func (s *Session) SetCommunicator(c Communicator) error {
	if c == nil {
		s.releaseStaging()
		return nil
	}
	if s.acc.pend > 0 {
		return fmt.Errorf("%s: SetCommunicator: %d micro-batch(es) pending: join the group before accumulating", s.plan.Model, s.acc.pend)
	}
	if err := s.agree(c); err != nil {
		return err
	}
	if err := s.broadcastState(c); err != nil {
		return err
	}
	_, n, err := s.gradsVec()
	if err != nil {
		return err
	}
	bytes := n * int64(s.plan.DType.Size())
	dp := dataParallel{comm: c}
	switch h, ok := s.dev.(HostAllocator); {
	case s.deviceReduce(c): // no staging: MPI reads device memory
	case ok:
		if dp.host, err = h.AllocHost(bytes); err != nil {
			return fmt.Errorf("%s: pinned staging for the gradient all-reduce: %w", s.plan.Model, err)
		}
		dp.pinned = true
	default:
		dp.hostGo = make([]byte, bytes)
		dp.host = unsafe.Pointer(&dp.hostGo[0])
	}
	s.releaseStaging()
	s.dp = dp
	return nil
}

// Communicator is the session's communicator, nil when it trains alone.
func (s *Session) Communicator() Communicator { return s.dp.comm }

// ReduceTime is the time spent averaging gradients across ranks since
// SetCommunicator (copies to and from the host included).
func (s *Session) ReduceTime() time.Duration { return s.dp.spent }

func (s *Session) releaseStaging() {
	if s.dp.pinned {
		s.dev.(HostAllocator).FreeHost(s.dp.host)
	}
	s.dp = dataParallel{}
}

// deviceReduce: the communicator sums device memory itself. Only a CUDA
// device pins host memory, so that is what marks one.
func (s *Session) deviceReduce(c Communicator) bool {
	d, ok := c.(DeviceAllreducer)
	_, cuda := s.dev.(HostAllocator)
	return ok && cuda && d.CUDAAware()
}

// fingerprint names what every rank must agree on: the plan (buffers,
// dtypes, sizes at the session's bounds, kernels), the per-rank batch and
// the accumulation steps.
func (s *Session) fingerprint() []byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s %v %d %d\n", s.plan.Model, s.plan.DType, len(s.fns), len(s.plan.Funcs))
	for _, b := range s.plan.Buffers {
		fmt.Fprintf(h, "%s %s %v %d\n", b.Role, b.Name, b.DType, b.Elems.Eval(s.maxEnv))
	}
	out := h.Sum(nil)
	out = binary.LittleEndian.AppendUint64(out, uint64(s.maxEnv["B"]))
	return binary.LittleEndian.AppendUint64(out, uint64(s.acc.k))
}

// agree compares every rank's fingerprint with rank 0's. All ranks learn
// whether any differs, so all fail together instead of hanging later in
// mismatched all-reduces.
func (s *Session) agree(c Communicator) error {
	mine := s.fingerprint()
	root := append([]byte(nil), mine...)
	if err := c.Bcast(root, 0); err != nil {
		return fmt.Errorf("%s: rank %d: comparing models: %w", s.plan.Model, c.Rank(), err)
	}
	bad := []float64{0}
	var why string
	if !bytes.Equal(mine, root) {
		bad[0] = 1
		why = "a different model (plan)"
		b0, k0 := binary.LittleEndian.Uint64(root[32:]), binary.LittleEndian.Uint64(root[40:])
		if bytes.Equal(mine[:32], root[:32]) {
			why = fmt.Sprintf("batch %d and %d accumulation steps where rank 0 has %d and %d", s.maxEnv["B"], s.acc.k, b0, k0)
		}
	}
	if err := c.AllreduceSum(unsafe.Pointer(&bad[0]), 1, F64); err != nil {
		return fmt.Errorf("%s: rank %d: comparing models: %w", s.plan.Model, c.Rank(), err)
	}
	if why != "" {
		return fmt.Errorf("%s: rank %d of %d runs %s", s.plan.Model, c.Rank(), c.Size(), why)
	}
	if bad[0] > 0 {
		return fmt.Errorf("%s: rank %d of %d: %d rank(s) run another model or batch size than rank 0 (see their errors)", s.plan.Model, c.Rank(), c.Size(), int(bad[0]))
	}
	return nil
}

// broadcastState sends rank 0's checkpoint (parameters, optimizer and
// other state, step, learning rate, seed) to every rank.
func (s *Session) broadcastState(c Communicator) error {
	var ckpt bytes.Buffer
	if c.Rank() == 0 {
		if err := s.Save(&ckpt); err != nil {
			return err
		}
	}
	n := binary.LittleEndian.AppendUint64(nil, uint64(ckpt.Len()))
	if err := c.Bcast(n, 0); err != nil {
		return fmt.Errorf("%s: rank %d: broadcasting parameters: %w", s.plan.Model, c.Rank(), err)
	}
	buf := ckpt.Bytes()
	if c.Rank() != 0 {
		buf = make([]byte, binary.LittleEndian.Uint64(n))
	}
	if err := c.Bcast(buf, 0); err != nil {
		return fmt.Errorf("%s: rank %d: broadcasting parameters: %w", s.plan.Model, c.Rank(), err)
	}
	if c.Rank() != 0 {
		return s.Load(bytes.NewReader(buf))
	}
	return nil
}

// reduceGrads agrees on the step's verdict over the ranks and, when no
// rank's step failed, replaces the gradient vector by its mean over the
// ranks.
func (s *Session) reduceGrads() error {
	c := s.dp.comm
	g, n, err := s.gradsVec()
	if err != nil {
		return err
	}
	start := time.Now()
	defer func() { s.dp.spent += time.Since(start) }()
	if ok, err := s.agreeVerdict(c); err != nil || !ok {
		return err // no rank commits: no need of the sum
	}
	dt, es, inv := s.plan.DType, int64(s.plan.DType.Size()), 1/float64(c.Size())
	if s.deviceReduce(c) {
		if err := c.(DeviceAllreducer).AllreduceSumDevice(s.ptrs[g], int(n), dt); err != nil {
			return fmt.Errorf("%s: gradient all-reduce: %w", s.plan.Model, err)
		}
		// grads = sum/N, through the accumulation vector (GEMMs do not
		// take aliased operands).
		if err := s.allocSum(); err != nil {
			return err
		}
		if err := s.dev.CopyDevice(s.acc.sum, s.ptrs[g], n*es); err != nil {
			return err
		}
		return s.axpy(s.ptrs[g], s.acc.sum, n, inv, 0)
	}
	if err := s.dev.CopyToHost(s.dp.host, s.ptrs[g], n*es); err != nil {
		return err
	}
	if err := c.AllreduceSum(s.dp.host, int(n), dt); err != nil {
		return fmt.Errorf("%s: gradient all-reduce: %w", s.plan.Model, err)
	}
	// The mean, as one process's loss over the N·b rows gives it (exact
	// when N is a power of two). A sum that overflows though every
	// rank's gradients were finite fails the update check alike on every
	// rank (each holds the same sum); under a loss scaler that is a skip
	// (sumOverflowed, loss_scale.go).
	switch dt {
	case F64:
		h := unsafe.Slice((*float64)(s.dp.host), n)
		for i := range h {
			h[i] *= inv
		}
	default:
		h, f := unsafe.Slice((*float32)(s.dp.host), n), float32(inv)
		for i := range h {
			h[i] *= f
		}
	}
	return s.dev.CopyToDevice(s.ptrs[g], s.dp.host, n*es)
}

// agreeVerdict tells every rank whether any rank's gradient phase failed
// (ok false), from one all-reduce of two counts: the ranks whose loss or
// gradients were not finite, and those whose step failed otherwise (a
// label out of range). A rank whose own step was good but another's was
// not marks its status block so that its update commits nothing and its
// check reports the peer's verdict: under a loss scaler a skip
// (peerNonFinite), as the rank that overflowed skips. A plan without a
// guard has no verdict to agree on.
func (s *Session) agreeVerdict(c Communicator) (ok bool, _ error) {
	buf := -1
	for _, ch := range s.plan.Checks {
		if ch.Func == "step" && ch.Kind == "guard" {
			buf = ch.Buf
		}
	}
	if buf < 0 {
		return true, nil
	}
	var blk [6]int32
	if err := s.dev.CopyToHost(unsafe.Pointer(&blk[0]), s.ptrs[buf], int64(len(blk)*4)); err != nil {
		return false, err
	}
	var counts [2]float64 // a local, not a field: cgo refuses a pointer into the Session
	failed := blk[0] != 0 || (blk[5] != 0 && blk[5] != 1)
	switch {
	case failed:
		counts[1] = 1
	case blk[4] != 0 || blk[5] == 1:
		counts[0] = 1
	}
	mine := counts[0]+counts[1] != 0
	if err := c.AllreduceSum(unsafe.Pointer(&counts[0]), 2, F64); err != nil {
		return false, fmt.Errorf("%s: agreeing on the step's verdict: %w", s.plan.Model, err)
	}
	switch {
	case counts[0]+counts[1] == 0:
		return true, nil
	case counts[1] > 0 && !failed:
		// A failure elsewhere outweighs a skip here: no rank skips
		// while another fails.
		return false, s.markStatus(peerFailed)
	case !mine:
		return false, s.markStatus(peerNonFinite)
	}
	return false, nil // the rank's own status says why
}

// markStatus fails the step on this rank with status word 5 = code, so
// that the update commits nothing and check reports why.
func (s *Session) markStatus(code int32) error {
	for _, ch := range s.plan.Checks {
		if ch.Func == "step" && ch.Kind == "guard" {
			return s.dev.CopyToDevice(s.ptrs[ch.Buf]+5*4, unsafe.Pointer(&code), 4)
		}
	}
	return nil
}

// sampleOffsetDP is the global index of the first row of this rank's
// batch: micro-batch i of the update is a global batch of Size()·b rows
// laid out rank by rank, so rank r's rows start at i·b·N + r·b (every
// rank runs batches of one size: the shard loader gives them so).
func (s *Session) sampleOffsetDP(batch int) int64 {
	c := s.dp.comm
	return int64(s.acc.rows)*int64(c.Size()) + int64(c.Rank())*int64(batch)
}
