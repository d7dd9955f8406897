package runtime_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// deferDev is a CPU device that runs its calls as a GPU's stream does:
// Launch, Gemm, Memset, the copies to the device and within it, and
// CopyToHostAsync are queued and run later, in order; CopyToHost and Sync
// run the whole queue first, WaitHost the queue up to the last copy into
// the block it names. blocking counts those waits, so a test sees
// whether the host waited for the device, and on what.
//
// It also has a copy stream (runtime.CopyStreamer): a copy queued there
// runs as early as a GPU's could, as soon as the main queue has run past
// its fence, and JoinCopies queues a wait for all of them; so a copy into
// inputs the step in flight still reads would change that step.
type deferDev struct {
	d        *cpu.Device
	q        []deferred
	ran      Fence      // main-queue calls run so far
	pushed   Fence      // main-queue calls queued so far
	side     []sideCopy // the copy stream's queue
	sideRan  int        // copies the copy stream ran
	blocking int        // CopyToHost and Sync calls that found work queued
	waited   int        // WaitHost calls that ran queued work
}

type Fence = runtime.Fence

type deferred struct {
	run  func() error
	into unsafe.Pointer // the host block an asynchronous copy writes, or nil
}

type sideCopy struct {
	after Fence
	run   func() error
}

func (d *deferDev) push(into unsafe.Pointer, f func() error) error {
	d.q = append(d.q, deferred{f, into})
	d.pushed++
	return nil
}

// drain runs the first n queued calls, and each side copy as soon as its
// fence has passed.
func (d *deferDev) drain(n int) error {
	q := d.q[:n]
	d.q = append([]deferred(nil), d.q[n:]...)
	if err := d.runSide(); err != nil {
		return err
	}
	for _, c := range q {
		if err := c.run(); err != nil {
			return err
		}
		d.ran++
		if err := d.runSide(); err != nil {
			return err
		}
	}
	return nil
}

// runSide runs the side copies whose fences have passed, in order.
func (d *deferDev) runSide() error {
	for len(d.side) > 0 && d.side[0].after <= d.ran {
		c := d.side[0]
		d.side = d.side[1:]
		if err := c.run(); err != nil {
			return err
		}
		d.sideRan++
	}
	return nil
}

func (d *deferDev) all() error {
	if len(d.q) > 0 {
		d.blocking++
	}
	if err := d.drain(len(d.q)); err != nil {
		return err
	}
	if len(d.side) > 0 {
		return fmt.Errorf("copies wait for fences past the end of the queue")
	}
	return nil
}

func (d *deferDev) Fence() (Fence, error) { return d.pushed, nil }
func (d *deferDev) CopyToDeviceAfter(f Fence, dst runtime.Ptr, src unsafe.Pointer, n int64) error {
	b := append([]byte(nil), unsafe.Slice((*byte)(src), n)...)
	d.side = append(d.side, sideCopy{f, func() error { return d.d.CopyToDevice(dst, unsafe.Pointer(&b[0]), n) }})
	return nil
}
func (d *deferDev) JoinCopies() error {
	upto := len(d.side) // the copies queued so far
	queued := d.sideRan + upto
	return d.push(nil, func() error {
		if d.sideRan < queued {
			return fmt.Errorf("JoinCopies: %d of the copies it joins have not run: their fences are later than the join", queued-d.sideRan)
		}
		return nil
	})
}

func (d *deferDev) Name() string                                   { return "deferred " + d.d.Name() }
func (d *deferDev) Load(m *runtime.Module) (runtime.Loaded, error) { return d.d.Load(m) }
func (d *deferDev) Alloc(n int64) (runtime.Ptr, error)             { return d.d.Alloc(n) }
func (d *deferDev) MemStats() runtime.MemStats                     { return d.d.MemStats() }
func (d *deferDev) Sync() error                                    { return d.all() }
func (d *deferDev) Free(p runtime.Ptr) error {
	if err := d.all(); err != nil {
		return err
	}
	return d.d.Free(p)
}
func (d *deferDev) Close() error {
	return d.d.Close()
}
func (d *deferDev) Memset(p runtime.Ptr, v byte, n int64) error {
	return d.push(nil, func() error { return d.d.Memset(p, v, n) })
}
func (d *deferDev) CopyDevice(dst, src runtime.Ptr, n int64) error {
	return d.push(nil, func() error { return d.d.CopyDevice(dst, src, n) })
}
func (d *deferDev) CopyToDevice(dst runtime.Ptr, src unsafe.Pointer, n int64) error {
	b := append([]byte(nil), unsafe.Slice((*byte)(src), n)...) // read before returning, as staging does
	return d.push(nil, func() error { return d.d.CopyToDevice(dst, unsafe.Pointer(&b[0]), n) })
}
func (d *deferDev) CopyToHost(dst unsafe.Pointer, src runtime.Ptr, n int64) error {
	if err := d.all(); err != nil {
		return err
	}
	return d.d.CopyToHost(dst, src, n)
}
func (d *deferDev) Gemm(g runtime.GemmArgs) error {
	return d.push(nil, func() error { return d.d.Gemm(g) })
}
func (d *deferDev) Launch(f runtime.Function, grid, block runtime.Dim3, shared int, args ...runtime.Arg) error {
	a := append([]runtime.Arg(nil), args...)
	return d.push(nil, func() error { return d.d.Launch(f, grid, block, shared, a...) })
}

// RunsWhole forwards the CPU device's answer (runtime.WholeLoops): its
// host forms of a recurrence run the whole loop in one launch.
func (d *deferDev) RunsWhole(k *runtime.KernelInfo) bool { return d.d.RunsWhole(k) }

func (d *deferDev) AllocHost(n int64) (unsafe.Pointer, error) {
	b := make([]byte, n)
	return unsafe.Pointer(&b[0]), nil
}
func (d *deferDev) FreeHost(p unsafe.Pointer) error { return d.WaitHost(p) }
func (d *deferDev) WaitHost(p unsafe.Pointer) error {
	last := -1
	for i, c := range d.q {
		if c.into == p {
			last = i
		}
	}
	if last < 0 {
		return nil
	}
	d.waited++
	return d.drain(last + 1)
}
func (d *deferDev) CopyToHostAsync(dst unsafe.Pointer, src runtime.Ptr, n int64) error {
	return d.push(dst, func() error { return d.d.CopyToHost(dst, src, n) })
}

var (
	_ runtime.AsyncReader  = (*deferDev)(nil)
	_ runtime.CopyStreamer = (*deferDev)(nil)
)

// stepRun is what a run of steps produced: each step's loss (the
// synchronous Step's, or TakeLosses'), each call's error, the skipped
// steps and the checkpoint at the end.
type stepRun struct {
	losses  []float64
	errs    []string
	skipped int
	scale   float64
	ckpt    []byte
	clock   []float64
}

// TestPipelinedMatchesSync (issue 26 item 1) trains the fp16 MLP under
// loss scaling with planted infinities, and the f32 MLP with a planted
// NaN loss and a label out of range, synchronously on the CPU device and
// pipelined on a device that defers its calls as a GPU's stream does:
//   - the pipelined host never waits for the step it just queued: when
//     Run("step") returns, the step's calls are still queued, and the
//     only wait was WaitHost on the step before's status slot;
//   - each step's loss arrives once, in order, bit for bit the
//     synchronous run's; each error arrives one call late, word for word
//     the synchronous run's (naming the step that caused it);
//   - a skipped step backs the scale off on the device, so the steps
//     after it run at the scale the synchronous run gives them: the
//     checkpoints at the end (parameters, optimizer state, scaler,
//     counters) are byte for byte the same.
//
// Planted bugs it catches (each planted by hand and seen to fail): the
// clock kernel without its backoff branch (the device's clock keeps the
// old scale: the loss scale is a power of two, so the fp16 MLP's steps
// give the same bits at either), judgeSlot rewriting the clock after a
// skip (markClock: the queued step's tick of the growth tracker is lost),
// the step number without the later step subtracted (the errors name the
// step after).
func TestPipelinedMatchesSync(t *testing.T) {
	for _, fp16 := range []bool{true, false} {
		t.Run(fmt.Sprintf("fp16=%v", fp16), func(t *testing.T) {
			const steps = 16
			plant := func(step int, x []float32, y []int32) {
				switch {
				case fp16 && step%7 == 3:
					x[5] = float32(math.Inf(1))
				case !fp16 && step == 5:
					x[7] = float32(math.Inf(1)) // a loss that is not finite
				case !fp16 && step == 9:
					y[3] = 10 // a label out of range
				}
			}
			run := func(pipelined bool) stepRun {
				base, err := cpu.New(cpu.Options{Threads: 1})
				if err != nil {
					t.Fatal(err)
				}
				defer base.Close()
				var dev runtime.Device = base
				dd := &deferDev{d: base}
				if pipelined {
					dev = dd
				}
				m := openClockModel(t, dev, fp16, 1)
				s := m.Session()
				if pipelined {
					if err := s.SetPipelined(true); err != nil {
						t.Fatal(err)
					}
				}
				r := rand.New(rand.NewPCG(11, 12))
				var out stepRun
				for step := range steps {
					x, y := clockBatch(r, false)
					plant(step, x, y)
					before := dd.waited
					dd.blocking = 0
					loss, err := m.Step(x, y)
					if err != nil {
						out.errs = append(out.errs, fmt.Sprintf("call %d: %v", step, err))
					}
					if !pipelined {
						if err == nil {
							out.losses = append(out.losses, float64(loss))
						}
						if s.StepSkipped() {
							out.skipped++
						}
						continue
					}
					if dd.blocking != 0 {
						t.Fatalf("step %d: the host waited for the whole queue %d time(s)", step, dd.blocking)
					}
					if len(dd.q) == 0 {
						t.Fatalf("step %d: Run(\"step\") returned with nothing queued: the host waited for its own step", step)
					}
					if step > 0 && dd.waited != before+1 {
						t.Fatalf("step %d: %d waits for a status slot, want 1", step, dd.waited-before)
					}
					if s.StepSkipped() {
						out.skipped++
					}
					out.losses = s.TakeLosses(out.losses)
				}
				if pipelined && dd.sideRan < 2*steps {
					t.Fatalf("%d inputs were copied on the copy stream, want the %d of %d steps", dd.sideRan, 2*steps, steps)
				}
				if pipelined {
					if err := s.Flush(); err != nil {
						out.errs = append(out.errs, fmt.Sprintf("call %d: %v", steps, err))
					}
					if s.StepSkipped() {
						out.skipped++
					}
					out.losses = s.TakeLosses(out.losses)
				}
				out.scale = s.LossScale()
				var buf bytes.Buffer
				if err := s.Save(&buf); err != nil {
					t.Fatal(err)
				}
				out.ckpt = buf.Bytes()
				if out.clock, err = s.ReadClock(); err != nil {
					t.Fatal(err)
				}
				return out
			}
			sync, pipe := run(false), run(true)
			if len(sync.losses) != len(pipe.losses) {
				t.Fatalf("%d losses synchronously, %d pipelined", len(sync.losses), len(pipe.losses))
			}
			for i := range sync.losses {
				if math.Float32bits(float32(sync.losses[i])) != math.Float32bits(float32(pipe.losses[i])) {
					t.Fatalf("loss %d: %v synchronously, %v pipelined", i, sync.losses[i], pipe.losses[i])
				}
			}
			if len(sync.errs) != len(pipe.errs) {
				t.Fatalf("errors synchronously %q, pipelined %q", sync.errs, pipe.errs)
			}
			for i := range sync.errs {
				// A pipelined error comes a call late, naming the same step.
				var sc, pc int
				var se, pe string
				fmt.Sscanf(sync.errs[i], "call %d:", &sc)
				fmt.Sscanf(pipe.errs[i], "call %d:", &pc)
				se, pe = sync.errs[i][len(fmt.Sprintf("call %d: ", sc)):], pipe.errs[i][len(fmt.Sprintf("call %d: ", pc)):]
				if pc != sc+1 || se != pe {
					t.Fatalf("error %d: synchronously %q, pipelined %q", i, sync.errs[i], pipe.errs[i])
				}
			}
			if fp16 && (sync.skipped == 0 || sync.skipped != pipe.skipped) {
				t.Fatalf("%d skipped steps synchronously, %d pipelined", sync.skipped, pipe.skipped)
			}
			if !fp16 && len(sync.errs) != 2 {
				t.Fatalf("the planted failures gave %q, want two errors", sync.errs)
			}
			if sync.scale != pipe.scale {
				t.Fatalf("loss scale %v synchronously, %v pipelined", sync.scale, pipe.scale)
			}
			if !bytes.Equal(sync.ckpt, pipe.ckpt) {
				t.Fatal("the checkpoints after the steps differ")
			}
			// The device's clock: its counters, scaler, bound and the next
			// step's scalars (the checkpoint holds the host's mirrors).
			for i := range sync.clock {
				if math.Float64bits(sync.clock[i]) != math.Float64bits(pipe.clock[i]) {
					t.Fatalf("clock word %d: %v synchronously, %v pipelined", i, sync.clock[i], pipe.clock[i])
				}
			}
			t.Logf("%d steps, %d losses, %d skipped, errors %q", steps, len(sync.losses), sync.skipped, sync.errs)
		})
	}
}

// TestPipelinedFlushes: with a step in flight, a method that reads or
// changes the session's state judges it first, and returns a failed
// step's error (once) instead of doing its work; Predict and
// accumulation's synchronous steps keep the losses flowing through
// TakeLosses.
func TestPipelinedFlushes(t *testing.T) {
	base, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	dd := &deferDev{d: base}
	m, err := mlp.New(dd, mlp.Options{Batch: 16, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := m.Session()
	if err := s.SetPipelined(true); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	if _, err := m.Step(clockBatch(r, true)); err != nil { // a loss that is not finite
		t.Fatalf("a call that only queued its step failed: %v", err)
	}
	var buf bytes.Buffer
	err = m.Save(&buf)
	var le *runtime.LossError
	if !errors.As(err, &le) || le.Step != 1 {
		t.Fatalf("Save with a failed step in flight: %v, want step 1's LossError", err)
	}
	if buf.Len() != 0 {
		t.Fatal("Save wrote a checkpoint and returned the step's error")
	}
	if err := m.Save(&buf); err != nil || s.Steps() != 0 {
		t.Fatalf("Save after the verdict was handed over: %v, %d steps", err, s.Steps())
	}
	if _, err := m.Step(clockBatch(r, false)); err != nil {
		t.Fatal(err)
	}
	if len(dd.q) == 0 {
		t.Fatal("the step ran before Step returned")
	}
	x, _ := clockBatch(r, false)
	if _, err := m.Predict(x); err != nil {
		t.Fatal(err)
	}
	if l := s.TakeLosses(nil); len(l) != 1 || s.Steps() != 1 {
		t.Fatalf("after Predict: losses %v and %d steps, want one of each", l, s.Steps())
	}
	// Accumulation is not pipelined: each call judges its own micro-batch.
	if err := s.SetAccumulationSteps(2); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := m.Step(clockBatch(r, false)); err != nil {
			t.Fatal(err)
		}
		if l := s.TakeLosses(nil); len(l) != 1 {
			t.Fatalf("micro-batch %d: losses %v, want its own", i, l)
		}
	}
	if s.Steps() != 3 {
		t.Fatalf("%d steps after two accumulated updates, want 3", s.Steps())
	}
	// Close returns the error of a failed step still in flight.
	if err := s.SetAccumulationSteps(1); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Step(clockBatch(r, true)); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); !errors.As(err, &le) || le.Step != 4 {
		t.Fatalf("Close with a failed step in flight: %v, want step 4's LossError", err)
	}
}

// TestPipelinedInputSets: with a copy stream the pipelined steps
// alternate between two sets of input buffers; an input a step does not
// write carries over from the step before, also across SetPipelined(false),
// as with the one set of a synchronous session (checkpoints byte for
// byte). Planted by hand and seen to fail: the copy into the set the step
// in flight reads (the losses differ), no carry-over of an input not
// written, and no fence behind the carry-over's copy (the next step's
// input, copied early on the copy stream, overwrote the label it was
// carrying over: found by this test).
func TestPipelinedInputSets(t *testing.T) {
	run := func(pipelined bool) []byte {
		base, err := cpu.New(cpu.Options{Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer base.Close()
		var dev runtime.Device = base
		if pipelined {
			dev = &deferDev{d: base}
		}
		m, err := mlp.New(dev, mlp.Options{Batch: 16, Seed: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		s := m.Session()
		if err := s.SetPipelined(pipelined); err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(5, 6))
		xOnly := func() {
			x, _ := clockBatch(r, false)
			if err := s.WriteInput("x", x, 16); err != nil {
				t.Fatal(err)
			}
			if err := s.Run("step", 16); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			if _, err := m.Step(clockBatch(r, false)); err != nil {
				t.Fatal(err)
			}
			if i%2 == 1 {
				xOnly() // y carries over
			}
		}
		if err := s.SetPipelined(false); err != nil {
			t.Fatal(err)
		}
		xOnly()
		if _, err := m.Step(clockBatch(r, false)); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := s.Save(&buf); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	if !bytes.Equal(run(false), run(true)) {
		t.Fatal("the checkpoints differ")
	}
}
