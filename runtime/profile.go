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
	Name  string // kernel name, or "gemm", "memset", "copy"
	Ops   string
	Calls int
	Total time.Duration
	Bytes int64 // bytes moved over all calls, from the plan's report fields
	Flops int64
}

type profiler struct {
	steps map[[2]int]*StepTime // (function index, step index)
}

// SetProfiling turns per-step timing on or off; turning it on clears the
// accumulated times.
func (s *Session) SetProfiling(on bool) {
	if on {
		s.prof = &profiler{steps: map[[2]int]*StepTime{}}
	} else {
		s.prof = nil
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
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.1f\t%.1f%%\t%.2f\t%.2f\t\n", t.Func, t.Index, t.Name, t.Calls, avg, share, gbs, gfs)
	}
	return tw.Flush()
}

// timeStep runs exec for step i of function fi and records its time.
func (s *Session) timeStep(fi int, fname string, i int, st *Step, exec func() error) error {
	t0 := time.Now()
	err := exec()
	if err == nil {
		err = s.dev.Sync()
	}
	d := time.Since(t0)
	k := [2]int{fi, i}
	t := s.prof.steps[k]
	if t == nil {
		t = &StepTime{Func: fname, Index: i, Name: s.stepName(st), Ops: st.Ops}
		s.prof.steps[k] = t
	}
	t.Calls++
	t.Total += d
	t.Bytes += st.Bytes.Eval(s.env)
	t.Flops += st.Flops.Eval(s.env)
	return err
}

func (s *Session) stepName(st *Step) string {
	if st.Label != "" {
		return st.Label
	}
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
