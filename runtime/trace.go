package runtime

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// A Chrome trace of the profiled calls: the Trace Event Format that
// torch.profiler's export_chrome_trace writes and that Perfetto
// (ui.perfetto.dev) and chrome://tracing open. While profiling
// (SetProfiling) the session keeps every call it times; WriteTrace writes
// one complete ("X") slice per call, in call order, on the host track,
// and on a DeviceTimer (the GPU) the same calls' device time on a second
// track.

// DeviceTimer is a device that times its launches and GEMMs itself
// (runtime/cuda: a pair of CUDA events around each), so that a trace can
// show device time beside the host's.
type DeviceTimer interface {
	// SetEventTiming turns the timing on or off; either drops what was
	// recorded.
	SetEventTiming(on bool) error
	// TimedCalls is the number of calls timed since timing was turned on.
	TimedCalls() int
	// DeviceSpans waits for the timed calls and returns them in call
	// order, each with its start relative to the first one's.
	DeviceSpans() ([]DeviceSpan, error)
}

// DeviceSpan is one call timed on the device.
type DeviceSpan struct {
	Name       string // the kernel's name, or "gemm"
	Start, Dur time.Duration
}

// maxTraceCalls bounds the memory a long profiled run keeps for its trace
// (48 bytes a call); later calls are counted and left out.
const maxTraceCalls = 1 << 19

// traceCall is one timed call: function and step index, host start
// (since profiling began) and duration, its bytes and FLOPs at the batch
// it ran with, and the range [dev0, dev1) of the device's timed calls it
// issued.
type traceCall struct {
	fn, step   int32
	dev0, dev1 int32
	start, dur time.Duration
	bytes      int64
	flops      int64
}

type trace struct {
	t0      time.Time
	calls   []traceCall
	dropped int
	// dev is the device's timer when it has one and its timing is on.
	dev       DeviceTimer
	deviceErr error
}

func (t *trace) add(c traceCall) {
	if len(t.calls) >= maxTraceCalls {
		t.dropped++
		return
	}
	t.calls = append(t.calls, c)
}

// traceEvent is one event of the Trace Event Format; ts and dur are in
// microseconds.
type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// Trace tracks: pid 1 is the host, pid 2 the device (when it times its
// own calls), each with one thread.
const (
	hostPid   = 1
	devicePid = 2
	trackTid  = 1
)

// WriteTrace writes the calls timed since SetProfiling(true) as a Chrome
// trace (JSON). Each slice is named by StepLabel, in plan order within
// each call of a function, and carries the function, step index, kernel,
// fused ops, bytes, FLOPs and achieved GB/s and GFLOP/s in its args. The
// host slices' durations are the profile's (Profile sums them per step).
func (s *Session) WriteTrace(w io.Writer) error {
	if s.prof == nil {
		return fmt.Errorf("%s: WriteTrace: profiling is off (call SetProfiling(true) and run steps first)", s.plan.Model)
	}
	tr := &s.prof.trace
	var spans []DeviceSpan
	if tr.dev != nil {
		var err error
		if spans, err = tr.dev.DeviceSpans(); err != nil {
			return fmt.Errorf("%s: WriteTrace: device timing: %w", s.plan.Model, err)
		}
	}
	bw := bufio.NewWriter(w)
	n := 0
	emit := func(e traceEvent) error { // one event a line
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		sep := ",\n"
		if n == 0 {
			sep = "\n"
		}
		n++
		if _, err := bw.WriteString(sep); err != nil {
			return err
		}
		_, err = bw.Write(b)
		return err
	}
	if _, err := bw.WriteString(`{"displayTimeUnit": "ms", "traceEvents": [`); err != nil {
		return err
	}
	meta := func(pid int, name, thread string) error {
		if err := emit(traceEvent{Name: "process_name", Ph: "M", Pid: pid, Tid: trackTid, Args: map[string]any{"name": name}}); err != nil {
			return err
		}
		if err := emit(traceEvent{Name: "process_sort_index", Ph: "M", Pid: pid, Tid: trackTid, Args: map[string]any{"sort_index": pid}}); err != nil {
			return err
		}
		return emit(traceEvent{Name: "thread_name", Ph: "M", Pid: pid, Tid: trackTid, Args: map[string]any{"name": thread}})
	}
	if err := meta(hostPid, fmt.Sprintf("ngen %s: host", s.plan.Model), "calls on "+s.dev.Name()+" (host time, a sync after each)"); err != nil {
		return err
	}
	if spans != nil {
		if err := meta(devicePid, fmt.Sprintf("ngen %s: device", s.plan.Model), s.dev.Name()+" (device time, events around each call)"); err != nil {
			return err
		}
	}
	// The device's clock starts at its first timed call; it is placed at
	// the host start of the first call that issued device work.
	devOffset, aligned := time.Duration(0), false
	for _, c := range tr.calls {
		f := &s.plan.Funcs[c.fn]
		st := &f.Steps[c.step]
		args := s.traceArgs(f, st, c.step, c.bytes, c.flops, c.dur)
		if err := emit(sliceEvent(StepLabel(s.plan, st), stepCat(st), hostPid, c.start, c.dur, args)); err != nil {
			return err
		}
		for i := c.dev0; i < c.dev1 && int(i) < len(spans); i++ {
			sp := spans[i]
			if !aligned {
				devOffset, aligned = c.start-sp.Start, true
			}
			dargs := s.traceArgs(f, st, c.step, c.bytes, c.flops, sp.Dur)
			dargs["device_name"] = sp.Name
			if err := emit(sliceEvent(StepLabel(s.plan, st), stepCat(st), devicePid, devOffset+sp.Start, sp.Dur, dargs)); err != nil {
				return err
			}
		}
	}
	var other []string
	if tr.dropped > 0 {
		other = append(other, fmt.Sprintf(`"dropped_calls": %d`, tr.dropped))
	}
	if tr.deviceErr != nil {
		b, _ := json.Marshal("device timing off: " + tr.deviceErr.Error())
		other = append(other, `"device_timing": `+string(b))
	}
	tail := "\n]"
	if len(other) > 0 {
		tail += `, "otherData": {`
		for i, o := range other {
			if i > 0 {
				tail += ", "
			}
			tail += o
		}
		tail += "}"
	}
	if _, err := bw.WriteString(tail + "}\n"); err != nil {
		return err
	}
	return bw.Flush()
}

// TraceCalls is the number of calls the trace holds and the number left
// out past its bound.
func (s *Session) TraceCalls() (kept, dropped int) {
	if s.prof == nil {
		return 0, 0
	}
	return len(s.prof.trace.calls), s.prof.trace.dropped
}

func sliceEvent(name, cat string, pid int, start, dur time.Duration, args map[string]any) traceEvent {
	d := micros(dur)
	return traceEvent{Name: name, Cat: cat, Ph: "X", Ts: micros(start), Dur: &d, Pid: pid, Tid: trackTid, Args: args}
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

func stepCat(st *Step) string {
	switch st.Kind {
	case LaunchStep:
		return "kernel"
	case GemmStep:
		return "gemm"
	case MemsetStep:
		return "memset"
	case CopyStep:
		return "copy"
	}
	return "call"
}

func (s *Session) traceArgs(f *Func, st *Step, index int32, bytes, flops int64, d time.Duration) map[string]any {
	args := map[string]any{"func": f.Name, "step": index, "ops": st.Ops, "bytes": bytes, "flops": flops}
	if st.Kind == LaunchStep && st.Kernel >= 0 && st.Kernel < len(s.plan.Kernels) {
		args["kernel"] = s.plan.Kernels[st.Kernel].Name
	}
	if sec := d.Seconds(); sec > 0 {
		args["GB/s"] = round3(float64(bytes) / sec / 1e9)
		args["GFLOP/s"] = round3(float64(flops) / sec / 1e9)
	}
	return args
}

func round3(x float64) float64 {
	return float64(int64(x*1000+0.5)) / 1000
}
