package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ngen-ml/ngen/internal/outfile"
	"github.com/ngen-ml/ngen/runlog"
	"github.com/ngen-ml/ngen/runlog/curves"
	"github.com/ngen-ml/ngen/runtime"
)

// What a run leaves behind besides its printout: -log (the metrics log,
// package runlog), -plot (its curves, package runlog/curves) and -trace
// (a Chrome trace of the profiled epoch, runtime.Session.WriteTrace).
// Every name is checked before training starts; the log is written as
// the run goes, the picture and the trace through a temporary file and
// rename at the end.
var (
	logPath   = flag.String("log", "", "write the run's metrics here as JSON lines (.jsonl): a line per training step (loss, lr, samples/s, device memory) and per evaluation, written as they happen; with -torch, PyTorch's beside it as NAME.torch.jsonl")
	plotPath  = flag.String("plot", "", "draw the training curves here after training (.png or .svg): loss per step and the metric per epoch; with -torch, PyTorch's run on the same axes")
	tracePath = flag.String("trace", "", "with -profile: write a Chrome trace (.json; Perfetto, chrome://tracing) of the profiled epoch's kernels and GEMMs here")
)

// checkOutputs rejects a bad -log, -plot or -trace before any training.
func checkOutputs(profile, torch bool) error {
	if *logPath != "" {
		if err := outfile.Check("-log", *logPath, ".jsonl"); err != nil {
			return err
		}
		if torch {
			if err := outfile.Check("-log (PyTorch's)", torchLogPath(*logPath), ".jsonl"); err != nil {
				return err
			}
		}
	}
	if *plotPath != "" {
		if err := outfile.Check("-plot", *plotPath, ".png", ".svg"); err != nil {
			return err
		}
	}
	if *tracePath != "" {
		if !profile {
			return fmt.Errorf("-trace %s: give -profile too (the trace is of the profiled epoch)", *tracePath)
		}
		if err := outfile.Check("-trace", *tracePath, ".json"); err != nil {
			return err
		}
	}
	return nil
}

// torchLogPath is where the PyTorch peer's log goes beside ours.
func torchLogPath(log string) string {
	return strings.TrimSuffix(log, filepath.Ext(log)) + ".torch.jsonl"
}

// recorder feeds -log and keeps what -plot draws. A nil recorder (neither
// flag given, or a rank other than 0) records nothing.
type recorder struct {
	w     *runlog.Writer
	log   runlog.Log
	start time.Time
	last  time.Time
	step  int
	// peerLog is where the PyTorch peer writes its log ("" when it
	// does not), and peerTemp whether that file is ours to remove.
	peerLog  string
	peerTemp bool
}

// newRecorder is the recorder of model's run; nil when neither -log nor
// -plot asks for one.
func newRecorder(model string) *recorder {
	if *logPath == "" && *plotPath == "" {
		return nil
	}
	return &recorder{log: runlog.Log{Run: runlog.Run{Kind: "run", Framework: "ngen", Model: model}}}
}

// begin starts the log once the device and batch are known, before the
// first step.
func (r *recorder) begin(dev runtime.Device, batch int) error {
	if r == nil {
		return nil
	}
	r.start, r.last = time.Now(), time.Now()
	r.log.Run.Device, r.log.Run.Batch = dev.Name(), batch
	if *logPath != "" {
		w, err := runlog.Create(*logPath, r.log.Run)
		if err != nil {
			return fmt.Errorf("-log: %w", err)
		}
		r.w = w
	}
	return nil
}

// epochStart restarts the step clock, so that an evaluation does not count
// against the next epoch's first step.
func (r *recorder) epochStart() {
	if r != nil {
		r.last = time.Now()
	}
}

// stepDone records one training step of rows rows.
func (r *recorder) stepDone(s *runtime.Session, epoch int, loss float32, rows int) error {
	if r == nil {
		return nil
	}
	now := time.Now()
	r.step++
	mem := s.Device().MemStats()
	st := runlog.Step{Kind: "step", Step: r.step, Epoch: epoch, Loss: float64(loss), LR: s.LR(),
		SamplesPerS: float64(rows) / now.Sub(r.last).Seconds(), MemAllocated: mem.Allocated, MemPeak: mem.Peak,
		Time: now.Sub(r.start).Seconds()}
	r.last = now
	r.log.Steps = append(r.log.Steps, st)
	if r.w != nil {
		return r.w.Step(st)
	}
	return nil
}

// evalDone records an evaluation after epoch; e carries its metrics.
func (r *recorder) evalDone(e runlog.Eval) error {
	if r == nil {
		return nil
	}
	e.Kind, e.Step, e.Time = "eval", r.step, time.Since(r.start).Seconds()
	r.log.Evals = append(r.log.Evals, e)
	if r.w != nil {
		return r.w.Eval(e)
	}
	return nil
}

// peerArgs are the PyTorch peer's arguments for its log: beside ours with
// -log, else a temporary file that -plot reads and removes.
func (r *recorder) peerArgs() ([]string, error) {
	if r == nil {
		return nil, nil
	}
	if *logPath != "" {
		r.peerLog = torchLogPath(*logPath)
	} else {
		f, err := os.CreateTemp("", "ngen-torch-*.jsonl")
		if err != nil {
			return nil, err
		}
		f.Close()
		r.peerLog, r.peerTemp = f.Name(), true
	}
	return []string{"--log", r.peerLog}, nil
}

// finish closes the log and draws -plot, with the PyTorch peer's run when
// it logged one.
func (r *recorder) finish() error {
	if r == nil {
		return nil
	}
	if r.peerTemp {
		defer os.Remove(r.peerLog)
	}
	if r.w != nil {
		if err := r.w.Close(); err != nil {
			return fmt.Errorf("-log %s: %w", *logPath, err)
		}
		fmt.Println("wrote", *logPath)
	}
	if r.peerLog != "" && !r.peerTemp {
		fmt.Println("wrote", r.peerLog, "(PyTorch's)")
	}
	if *plotPath == "" {
		return nil
	}
	runs := []curves.Run{{Name: "ngen " + r.log.Run.Model, Log: &r.log}}
	if r.peerLog != "" {
		peer, err := runlog.ReadFile(r.peerLog)
		if err != nil {
			return fmt.Errorf("-plot: the PyTorch peer's log: %w", err)
		}
		runs = append(runs, curves.Run{Name: "PyTorch " + r.log.Run.Model, Log: peer})
	}
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(*plotPath)), ".")
	img, err := curves.Render(runs, format, curves.Options{Title: fmt.Sprintf("%s, batch %d", r.log.Run.Model, r.log.Run.Batch)})
	if err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	if err := outfile.Write(*plotPath, img); err != nil {
		return fmt.Errorf("-plot: %w", err)
	}
	fmt.Println("wrote", *plotPath)
	return nil
}

// writeTrace writes -trace from a session that profiled an epoch.
func writeTrace(s *runtime.Session) error {
	if *tracePath == "" {
		return nil
	}
	var buf bytes.Buffer
	if err := s.WriteTrace(&buf); err != nil {
		return fmt.Errorf("-trace: %w", err)
	}
	if err := outfile.Write(*tracePath, buf.Bytes()); err != nil {
		return fmt.Errorf("-trace: %w", err)
	}
	kept, dropped := s.TraceCalls()
	note := ""
	if dropped > 0 {
		note = fmt.Sprintf("; %d later calls left out", dropped)
	}
	fmt.Printf("wrote %s (%d calls%s; open it in ui.perfetto.dev or chrome://tracing)\n", *tracePath, kept, note)
	return nil
}
