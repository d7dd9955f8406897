package runtime

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"
)

// StepTime is the accumulated wall time of one plan step, as
// torch.profiler's key_averages reports per op. Times include a device
// synchronisation after the step, so they are exact on asynchronous
// devices too, at the cost of serialising the stream while profiling.
type StepTime struct {
	Func  string // "step", "predict"
	Index int    // position in the function's plan steps
	Name  string // kernel name (shared by launches that compute alike), or "gemm", "memset", "copy"
	// Label names the call for people (StepLabel): the launch's layer and
	// ops, the parameter a GEMM reads or the gradient it writes.
	Label string
	Ops   string
	Calls int
	// Launches is the device calls one run of the step issues: a stepped
	// kernel's launches (KernelInfo.Steps) on a device that runs it a
	// step a launch, else 1. A device that times its own calls (CUDA
	// events) reports Calls × Launches times for the step.
	Launches int
	Total    time.Duration
	Bytes    int64 // bytes moved over all calls, from the plan's report fields
	Flops    int64
}

type profiler struct {
	steps map[[2]int]*StepTime // (function index, step index)
	trace trace                // every timed call, for WriteTrace (trace.go)
}

// SetProfiling turns per-step timing on or off; turning it on clears the
// accumulated times and the trace. On a device that times its own calls
// (a DeviceTimer: CUDA events on the GPU) it turns that timing on too,
// for the trace's device track.
func (s *Session) SetProfiling(on bool) {
	if on {
		s.prof = &profiler{steps: map[[2]int]*StepTime{}, trace: trace{t0: time.Now()}}
	} else {
		s.prof = nil
	}
	if dt, ok := s.dev.(DeviceTimer); ok {
		err := dt.SetEventTiming(on)
		if s.prof != nil {
			if err == nil {
				s.prof.trace.dev = dt
			}
			s.prof.trace.deviceErr = err
		}
	}
}

// Profile returns the accumulated step times, slowest first.
func (s *Session) Profile() []StepTime {
	if s.prof == nil {
		return nil
	}
	var out []StepTime
	for _, t := range s.prof.steps {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Total != out[j].Total {
			return out[i].Total > out[j].Total
		}
		return out[i].Index < out[j].Index
	})
	return out
}

// WriteProfile prints Profile as a table with the share of the total time
// and the achieved bandwidth and FLOP rate of each step.
func WriteProfile(w io.Writer, ts []StepTime) error {
	var total time.Duration
	for _, t := range ts {
		total += t.Total
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "func\tstep\tname\tcalls\tavg µs\tshare\tGB/s\tGFLOP/s\t")
	for _, t := range ts {
		sec := t.Total.Seconds()
		avg := sec / float64(max(t.Calls, 1)) * 1e6
		share := 0.0
		if total > 0 {
			share = 100 * float64(t.Total) / float64(total)
		}
		gbs, gfs := 0.0, 0.0
		if sec > 0 {
			gbs, gfs = float64(t.Bytes)/sec/1e9, float64(t.Flops)/sec/1e9
		}
		name := t.Label
		if name == "" {
			name = t.Name
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.1f\t%.1f%%\t%.2f\t%.2f\t\n", t.Func, t.Index, name, t.Calls, avg, share, gbs, gfs)
	}
	return tw.Flush()
}

// timeStep runs exec for step i of function fi and records its time.
func (s *Session) timeStep(fi int, fname string, i int, st *Step, exec func() error) error {
	tr := &s.prof.trace
	var dev0 int
	if tr.dev != nil {
		dev0 = tr.dev.TimedCalls()
	}
	t0 := time.Now()
	err := exec()
	if err == nil {
		err = s.dev.Sync()
	}
	d := time.Since(t0)
	dev1 := dev0
	if tr.dev != nil {
		dev1 = tr.dev.TimedCalls()
	}
	k := [2]int{fi, i}
	t := s.prof.steps[k]
	if t == nil {
		t = &StepTime{Func: fname, Index: i, Name: s.stepName(st), Label: StepLabel(s.plan, st), Ops: st.Ops, Launches: 1}
		if st.Kind == LaunchStep {
			t.Launches = s.launches[st.Kernel]
		}
		s.prof.steps[k] = t
	}
	bytes, flops := st.Bytes.Eval(s.env), st.Flops.Eval(s.env)
	t.Calls++
	t.Total += d
	t.Bytes += bytes
	t.Flops += flops
	tr.add(traceCall{fn: int32(fi), step: int32(i), dev0: int32(dev0), dev1: int32(dev1), start: t0.Sub(tr.t0), dur: d, bytes: bytes, flops: flops})
	return err
}

// stepName is the step's kernel (shared by the launches that compute
// alike), or its kind.
func (s *Session) stepName(st *Step) string {
	switch st.Kind {
	case LaunchStep:
		return s.fns[st.Kernel].Name()
	case GemmStep:
		return "gemm"
	case MemsetStep:
		return "memset"
	case CopyStep:
		return "copy"
	}
	return "?"
}
