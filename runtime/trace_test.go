package runtime_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// timing is a runtime.DeviceTimer on the CPU: like runtime/cuda's CUDA
// events, it times every Launch and Gemm itself while its timing is on,
// including calls the session makes outside its plan steps (the
// accumulation's axpy GEMMs).
type timing struct {
	*cpu.Device
	on    bool
	t0    time.Time
	spans []runtime.DeviceSpan
}

func (d *timing) SetEventTiming(on bool) error {
	d.on, d.spans = on, nil
	return nil
}

func (d *timing) TimedCalls() int { return len(d.spans) }

func (d *timing) DeviceSpans() ([]runtime.DeviceSpan, error) {
	return append([]runtime.DeviceSpan(nil), d.spans...), nil
}

func (d *timing) timed(name string, f func() error) error {
	if !d.on {
		return f()
	}
	start := time.Now()
	if len(d.spans) == 0 {
		d.t0 = start
	}
	err := f()
	d.spans = append(d.spans, runtime.DeviceSpan{Name: name, Start: start.Sub(d.t0), Dur: time.Since(start)})
	return err
}

func (d *timing) Launch(f runtime.Function, grid, block runtime.Dim3, shared int, args ...runtime.Arg) error {
	return d.timed(f.Name(), func() error { return d.Device.Launch(f, grid, block, shared, args...) })
}

func (d *timing) Gemm(g runtime.GemmArgs) error {
	return d.timed("gemm", func() error { return d.Device.Gemm(g) })
}

// traceFile is the part of the Trace Event Format the test reads.
type traceFile struct {
	TraceEvents []map[string]any `json:"traceEvents"`
	OtherData   map[string]any   `json:"otherData"`
}

// TestWriteTrace profiles training steps (with gradient accumulation,
// whose axpy GEMMs the device times but no plan step issues) and a
// prediction of the seed MLP, and reads the Chrome trace back: valid
// JSON whose slices have name, ph, ts, dur, pid and tid; host slices
// that sum to the profile's totals per step (within 1%) and come in plan
// order; one device slice per launch and GEMM, on its own track, named
// alike.
func TestWriteTrace(t *testing.T) {
	base, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	dev := &timing{Device: base}
	m, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	s := m.Session()
	if err := s.WriteTrace(&bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "profiling is off") {
		t.Fatalf("WriteTrace without profiling: %v", err)
	}
	if err := s.SetAccumulationSteps(2); err != nil {
		t.Fatal(err)
	}
	s.SetProfiling(true)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{8, 8, 8, 5} {
		x, y := make([]float32, n*784), make([]int32, n)
		for i := range x {
			x[i] = r.Float32()
		}
		for i := range y {
			y[i] = int32(r.IntN(10))
		}
		if _, err := m.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Predict(make([]float32, 3*784)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := s.WriteTrace(&buf); err != nil {
		t.Fatal(err)
	}
	var tf traceFile
	if err := json.Unmarshal(buf.Bytes(), &tf); err != nil {
		t.Fatalf("trace is not JSON: %v\n%.2000s", err, buf.String())
	}
	plan := s.Plan()
	funcs := map[string]*runtime.Func{}
	for i := range plan.Funcs {
		funcs[plan.Funcs[i].Name] = &plan.Funcs[i]
	}
	type key struct {
		fn   string
		step int
	}
	hostSum := map[key]float64{}
	var host, device []map[string]any
	for _, e := range tf.TraceEvents {
		if e["ph"] != "X" {
			continue
		}
		for _, f := range []string{"name", "ph", "ts", "dur", "pid", "tid"} {
			if _, ok := e[f]; !ok {
				t.Fatalf("slice without %q: %v", f, e)
			}
		}
		args, _ := e["args"].(map[string]any)
		for _, f := range []string{"func", "step", "bytes", "flops"} {
			if _, ok := args[f]; !ok {
				t.Fatalf("slice without args.%s: %v", f, e)
			}
		}
		fn := funcs[args["func"].(string)]
		idx := int(args["step"].(float64))
		if want := runtime.StepLabel(plan, &fn.Steps[idx]); e["name"] != want {
			t.Fatalf("slice %v named %q, want %q", args, e["name"], want)
		}
		switch e["pid"].(float64) {
		case 1:
			host = append(host, e)
			hostSum[key{fn.Name, idx}] += e["dur"].(float64)
		case 2:
			device = append(device, e)
		default:
			t.Fatalf("slice on pid %v", e["pid"])
		}
	}
	// Durations: per step, and in all, the profile's.
	var total, traced float64
	for _, p := range s.Profile() {
		us := float64(p.Total.Nanoseconds()) / 1e3
		got := hostSum[key{p.Func, p.Index}]
		if math.Abs(got-us) > 0.01*us+1e-3 {
			t.Errorf("%s step %d (%s): slices sum to %.3f µs, the profile says %.3f", p.Func, p.Index, p.Label, got, us)
		}
		total += us
	}
	for _, v := range hostSum {
		traced += v
	}
	if math.Abs(traced-total) > 0.01*total {
		t.Errorf("slices sum to %.1f µs, the profile to %.1f", traced, total)
	}
	// Plan order: each call of a function runs its steps 0, 1, 2, ...
	// (a micro-batch without its update stops at UpdateFrom), in time.
	prevFn, prevStep, prevEnd := "", -1, 0.0
	calls := map[string]int{}
	for _, e := range host {
		args := e["args"].(map[string]any)
		fn, idx := args["func"].(string), int(args["step"].(float64))
		if fn != prevFn || idx <= prevStep {
			if idx != 0 {
				t.Fatalf("a call of %s starts at step %d", fn, idx)
			}
			calls[fn]++
		} else if want := nextRun(plan, funcs[fn], prevStep); idx != want {
			t.Fatalf("%s: step %d after step %d, want %d", fn, idx, prevStep, want)
		}
		ts := e["ts"].(float64)
		if ts+1e-3 < prevEnd {
			t.Fatalf("slice %s at %.3f µs starts before the previous one ends (%.3f)", e["name"], ts, prevEnd)
		}
		prevFn, prevStep, prevEnd = fn, idx, ts+e["dur"].(float64)
	}
	if calls["step"] != 4 || calls["predict"]+calls["predict_eval"] != 1 {
		t.Fatalf("calls %v: want 4 steps and 1 prediction", calls)
	}
	// The device track: one slice per launch and GEMM, none for the
	// accumulation's own GEMMs, named by the step, with the kernel the
	// device ran.
	var want []string
	for _, e := range host {
		args := e["args"].(map[string]any)
		st := &funcs[args["func"].(string)].Steps[int(args["step"].(float64))]
		if st.Kind == runtime.LaunchStep || st.Kind == runtime.GemmStep {
			want = append(want, e["name"].(string))
		}
	}
	if len(dev.spans) <= len(want) {
		t.Fatalf("the device timed %d calls for %d launches and GEMMs: the accumulation's GEMMs were not timed", len(dev.spans), len(want))
	}
	if len(device) != len(want) {
		t.Fatalf("%d device slices for %d launches and GEMMs", len(device), len(want))
	}
	for i, e := range device {
		if e["name"] != want[i] || e["tid"].(float64) != 1 {
			t.Fatalf("device slice %d is %v, want %s", i, e["name"], want[i])
		}
		args := e["args"].(map[string]any)
		if k, ok := args["kernel"]; ok && args["device_name"] != k {
			t.Fatalf("device slice %d ran %v, the step launches %v", i, args["device_name"], k)
		}
	}
	names := 0
	for _, e := range tf.TraceEvents {
		if e["ph"] == "M" && (e["name"] == "process_name" || e["name"] == "thread_name") {
			names++
		}
	}
	if names != 4 {
		t.Fatalf("%d process and thread names, want a host and a device track", names)
	}
}

// nextRun is the step of f that runs after step i in a new session: steps
// whose condition does not hold (the grad-norm kernel while clipping is
// off) are skipped.
func nextRun(plan *runtime.Plan, f *runtime.Func, i int) int {
	for i++; i < len(f.Steps) && !plan.RunsAtStart(f.Steps[i].When); i++ {
	}
	return i
}
