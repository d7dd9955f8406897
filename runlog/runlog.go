// Package runlog is the metrics log of a training run: JSON Lines, one
// object a line, written as the run goes so that a run that dies keeps
// its log. cmd/train -log writes it (and bench/torch_train.py --log the
// PyTorch peer's, in the same form); `ngen plot` and cmd/train -plot read
// it back and draw the curves (package runlog/curves).
//
// A log is a run line, then a step line per training step and an eval
// line per evaluation:
//
//	{"kind":"run","framework":"ngen","model":"convnet","device":"cpu (2 threads)","batch":64}
//	{"kind":"step","step":1,"epoch":1,"loss":2.3051,"lr":0.001,"samples_per_s":812.4,"mem_allocated":59768832,"mem_peak":59768832,"time_s":0.079}
//	{"kind":"eval","step":938,"epoch":1,"train_loss":0.5123,"test_acc":0.8521,"samples_per_s":1450.2,"time_s":41.3}
package runlog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Run is the first line: who trained what.
type Run struct {
	Kind      string `json:"kind"` // "run"
	Framework string `json:"framework"`
	Model     string `json:"model"`
	Device    string `json:"device,omitempty"`
	Batch     int    `json:"batch,omitempty"`
}

// Step is one training step (one batch).
type Step struct {
	Kind  string  `json:"kind"` // "step"
	Step  int     `json:"step"` // counted from 1 over the whole run
	Epoch int     `json:"epoch"`
	Loss  float64 `json:"loss"`
	LR    float64 `json:"lr"`
	// SamplesPerS is the step's rows over its wall time, the wait for
	// its batch included.
	SamplesPerS float64 `json:"samples_per_s"`
	// MemAllocated and MemPeak are the device's (runtime.MemStats;
	// torch.cuda.memory_allocated and max_memory_allocated), 0 where
	// the device does not say.
	MemAllocated int64   `json:"mem_allocated"`
	MemPeak      int64   `json:"mem_peak"`
	Time         float64 `json:"time_s"` // since the log began
}

// Eval is one evaluation, after an epoch. Each metric is present when the
// run measured it.
type Eval struct {
	Kind      string   `json:"kind"` // "eval"
	Step      int      `json:"step"`
	Epoch     int      `json:"epoch"`
	TrainLoss float64  `json:"train_loss"` // the epoch's mean training loss
	TestAcc   *float64 `json:"test_acc,omitempty"`
	ValAcc    *float64 `json:"val_acc,omitempty"`
	ValBPC    *float64 `json:"val_bpc,omitempty"` // validation bits per character
	// SamplesPerS is the epoch's training throughput.
	SamplesPerS float64 `json:"samples_per_s"`
	Time        float64 `json:"time_s"`
}

// Metric names, in the order Metric prefers them.
const (
	MetricValBPC  = "validation bits per character"
	MetricValAcc  = "validation accuracy"
	MetricTestAcc = "test accuracy"
)

// Metric is the eval's main metric and its name: validation bits per
// character, validation accuracy or test accuracy, the first present.
func (e Eval) Metric() (name string, v float64, ok bool) {
	for _, n := range []string{MetricValBPC, MetricValAcc, MetricTestAcc} {
		if v, ok := e.Value(n); ok {
			return n, v, true
		}
	}
	return "", 0, false
}

// Value is the metric called name, when the eval measured it.
func (e Eval) Value(name string) (float64, bool) {
	var p *float64
	switch name {
	case MetricValBPC:
		p = e.ValBPC
	case MetricValAcc:
		p = e.ValAcc
	case MetricTestAcc:
		p = e.TestAcc
	}
	if p == nil {
		return 0, false
	}
	return *p, true
}

// F is a metric value for Eval's optional fields.
func F(x float64) *float64 { return &x }

// Writer writes a log. Each record is one write of one line, so the file
// holds every record written before a crash.
type Writer struct {
	mu    sync.Mutex
	w     io.Writer
	f     *os.File // when Create opened it
	start time.Time
	err   error
}

// Create creates (or truncates) the log file path and writes its run line.
func Create(path string, run Run) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w := NewWriter(f, run)
	w.f = f
	if w.err != nil {
		f.Close()
		return nil, w.err
	}
	return w, nil
}

// NewWriter writes a log to w, starting with its run line.
func NewWriter(w io.Writer, run Run) *Writer {
	lw := &Writer{w: w, start: time.Now()}
	run.Kind = "run"
	lw.write(run)
	return lw
}

// Since is the time since the log began, for Step.Time and Eval.Time.
func (w *Writer) Since() float64 { return time.Since(w.start).Seconds() }

// Step writes a step line; Time is filled in when zero.
func (w *Writer) Step(s Step) error {
	s.Kind = "step"
	if s.Time == 0 {
		s.Time = w.Since()
	}
	return w.write(s)
}

// Eval writes an eval line; Time is filled in when zero.
func (w *Writer) Eval(e Eval) error {
	e.Kind = "eval"
	if e.Time == 0 {
		e.Time = w.Since()
	}
	return w.write(e)
}

func (w *Writer) write(rec any) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	b, err := json.Marshal(rec)
	if err != nil {
		w.err = err
		return err
	}
	if _, err := w.w.Write(append(b, '\n')); err != nil {
		w.err = fmt.Errorf("run log: %w", err)
	}
	return w.err
}

// Close closes the file Create opened and returns the first write error.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		if err := w.f.Close(); w.err == nil && err != nil {
			w.err = err
		}
		w.f = nil
	}
	return w.err
}

// Log is a log read back.
type Log struct {
	Run   Run
	Steps []Step
	Evals []Eval
}

// Read reads a log. A line that is not a record, or a record of an
// unknown kind, is an error naming its line; a last line cut short (a
// run killed mid-write) is dropped.
func Read(r io.Reader) (*Log, error) {
	var l Log
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var pending error
	n := 0
	for sc.Scan() {
		n++
		if pending != nil {
			return nil, pending
		}
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var k struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(line, &k); err != nil {
			pending = fmt.Errorf("line %d: %v", n, err) // an error unless it is the last line
			continue
		}
		var err error
		switch k.Kind {
		case "run":
			err = json.Unmarshal(line, &l.Run)
		case "step":
			var s Step
			err = json.Unmarshal(line, &s)
			l.Steps = append(l.Steps, s)
		case "eval":
			var e Eval
			err = json.Unmarshal(line, &e)
			l.Evals = append(l.Evals, e)
		default:
			err = fmt.Errorf("unknown kind %q", k.Kind)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if n == 0 || (l.Run.Kind == "" && len(l.Steps) == 0 && len(l.Evals) == 0) {
		return nil, fmt.Errorf("no records")
	}
	return &l, nil
}

// ReadFile reads the log at path.
func ReadFile(path string) (*Log, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return l, nil
}
