package bench

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/ngen-ml/ngen/runtime"
)

// This file is the GPU benchmark's bookkeeping, without the cuda tag so
// that CI tests it: pairing the CUDA-event times of a run's launches with
// the plan steps that issued them.

// kernelRow is one launch or GEMM step of the training step: its GPU time
// summed over the profiled steps (CUDA events) and its bytes and FLOPs
// summed likewise (the plan's report fields, what ngen report prints).
type kernelRow struct {
	Index     int // position in the plan's step function
	Name, Ops string
	Calls     int
	// Launches is the device calls one run of the step issues (a stepped
	// recurrence's T launches), each timed by its own events.
	Launches     int
	Time         time.Duration
	Bytes, Flops int64
}

// eventRows pairs the device's event times, in call order, with the steps
// of function "step" in prof (a Session profile of the same run): the
// device times kernel launches and GEMMs, not memsets or copies, so the
// i-th time belongs to the (i mod k)-th such step. A name that does not
// match means something else was launched, and the pairing is refused.
func eventRows(prof []runtime.StepTime, names []string, times []time.Duration) ([]kernelRow, error) {
	var rows []kernelRow
	for _, p := range prof {
		if p.Func == "step" && p.Name != "memset" && p.Name != "copy" {
			rows = append(rows, kernelRow{Index: p.Index, Name: p.Name, Ops: p.Ops, Calls: p.Calls, Launches: max(p.Launches, 1), Bytes: p.Bytes, Flops: p.Flops})
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Index < rows[j].Index })
	per := 0 // timed calls of one run of the function
	for _, r := range rows {
		per += r.Launches
	}
	if per == 0 || len(names) == 0 || len(names)%per != 0 || len(names) != len(times) {
		return nil, fmt.Errorf("%d timed launches for %d launch and GEMM steps issuing %d calls a run", len(names), len(rows), per)
	}
	for i := 0; i < len(names); {
		for k := range rows {
			r := &rows[k]
			for range r.Launches {
				if names[i] != r.Name {
					return nil, fmt.Errorf("timed launch %d is %s, but step %d launches %s", i, names[i], r.Index, r.Name)
				}
				r.Time += times[i]
				i++
			}
		}
	}
	for i := range rows {
		if rows[i].Calls != len(names)/per {
			return nil, fmt.Errorf("step %d (%s) ran %d times in the profile and %d in the event timing", rows[i].Index, rows[i].Name, rows[i].Calls, len(names)/per)
		}
	}
	return rows, nil
}

// writeRows prints rows slowest first: average GPU time per launch,
// achieved bandwidth and its share of peak (bytes per second), and
// GFLOP/s, then the total against the step's wall time.
func writeRows(w io.Writer, rows []kernelRow, peak float64, step time.Duration) error {
	rows = append([]kernelRow(nil), rows...)
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Time > rows[j].Time })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  step\tkernel\tavg µs\tGB/s\t% of peak\tGFLOP/s\tops")
	var busy time.Duration
	calls := 1
	for _, r := range rows {
		busy += r.Time
		calls = max(r.Calls, 1)
		sec := r.Time.Seconds()
		gbs, gfs := 0.0, 0.0
		if sec > 0 {
			gbs, gfs = float64(r.Bytes)/sec, float64(r.Flops)/sec/1e9
		}
		ops := r.Ops
		if len(ops) > 60 {
			ops = ops[:57] + "..."
		}
		fmt.Fprintf(tw, "  %d\t%s\t%.1f\t%.1f\t%.1f%%\t%.1f\t%s\n", r.Index, r.Name, sec/float64(calls)*1e6, gbs/1e9, 100*gbs/peak, gfs, ops)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// The rest of the step is launch overhead, copies and the host.
	perStep := busy / time.Duration(calls)
	_, err := fmt.Fprintf(w, "  kernels and GEMMs busy %.3f ms of the %.3f ms step (%.0f%%)\n",
		ms(perStep), ms(step), 100*float64(perStep)/float64(max(step, 1)))
	return err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func TestEventRows(t *testing.T) {
	prof := []runtime.StepTime{ // as Session.Profile returns it: slowest first
		{Func: "step", Index: 2, Name: "gemm", Calls: 2, Bytes: 800, Flops: 1000},
		{Func: "step", Index: 0, Name: "memset", Calls: 2},
		{Func: "step", Index: 1, Name: "relu_fwd", Calls: 2, Bytes: 400},
		{Func: "predict", Index: 0, Name: "relu_fwd", Calls: 1},
	}
	us := time.Microsecond
	names := []string{"relu_fwd", "gemm", "relu_fwd", "gemm"}
	rows, err := eventRows(prof, names, []time.Duration{1 * us, 10 * us, 3 * us, 30 * us})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Name != "relu_fwd" || rows[0].Time != 4*us || rows[1].Time != 40*us || rows[1].Bytes != 800 {
		t.Fatalf("rows %+v", rows)
	}
	var b strings.Builder
	if err := writeRows(&b, rows, 1e9, 100*us); err != nil {
		t.Fatal(err)
	}
	// gemm: 800 bytes in 40 µs is 0.02 GB/s, 2% of 1 GB/s; busy 22 µs a step.
	for _, want := range []string{"gemm", "20.0", "0.0", "2.0%", "busy 0.022 ms of the 0.100 ms step (22%)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
	if _, err := eventRows(prof, []string{"gemm", "relu_fwd"}, []time.Duration{us, us}); err == nil {
		t.Error("launches out of order were paired")
	}
	if _, err := eventRows(prof, names[:3], make([]time.Duration, 3)); err == nil {
		t.Error("a partial step was paired")
	}
	// A stepped recurrence (runtime.KernelInfo.Steps) times each of its
	// launches: three a run here, summed into its row.
	stepped := []runtime.StepTime{
		{Func: "step", Index: 0, Name: "rnn_scan_fwd", Calls: 2, Launches: 3},
		{Func: "step", Index: 1, Name: "gemm", Calls: 2, Launches: 1},
	}
	scan := []string{"rnn_scan_fwd", "rnn_scan_fwd", "rnn_scan_fwd", "gemm"}
	rows, err = eventRows(stepped, append(scan, scan...), []time.Duration{1 * us, 2 * us, 3 * us, 10 * us, 4 * us, 5 * us, 6 * us, 20 * us})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Time != 21*us || rows[1].Time != 30*us || rows[0].Launches != 3 {
		t.Fatalf("stepped rows %+v", rows)
	}
	if _, err := eventRows(stepped, scan[1:], make([]time.Duration, 3)); err == nil {
		t.Error("a stepped run short of a launch was paired")
	}
}
