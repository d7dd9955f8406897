package curves

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"

	"github.com/ngen-ml/ngen/runlog"
)

func fakeRun(framework string, epochs, perEpoch int, rate float64) *runlog.Log {
	l := &runlog.Log{Run: runlog.Run{Framework: framework, Model: "convnet"}}
	n := 0
	for e := 1; e <= epochs; e++ {
		for k := 0; k < perEpoch; k++ {
			n++
			l.Steps = append(l.Steps, runlog.Step{Step: n, Epoch: e, Loss: 2.3*math.Exp(-float64(n)/200) + 0.3 + 0.1*math.Sin(float64(n)), SamplesPerS: rate})
		}
		l.Evals = append(l.Evals, runlog.Eval{Step: n, Epoch: e, TestAcc: runlog.F(0.8 + 0.03*float64(e)), SamplesPerS: rate})
	}
	return l
}

// TestRender: two runs come out as a PNG and an SVG that name both runs
// with their throughput; runs measuring different metrics, and no runs,
// are errors.
func TestRender(t *testing.T) {
	runs := []Run{{"ngen convnet", fakeRun("ngen", 3, 300, 1234)}, {"pytorch convnet", fakeRun("pytorch", 3, 300, 987)}}
	png, err := Render(runs, "png", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 10000 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("PNG of %d bytes", len(png))
	}
	svg, err := Render(runs, "svg", Options{Smooth: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<svg", "ngen convnet: 1234 samples/s", "pytorch convnet: 987 samples/s", "mean of 10 steps", "test accuracy per epoch", "89%"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	bpc := fakeRun("ngen", 2, 10, 1)
	for i := range bpc.Evals {
		bpc.Evals[i].TestAcc, bpc.Evals[i].ValBPC = nil, runlog.F(3)
	}
	if _, err := Render(append(runs, Run{"lm", bpc}), "png", Options{}); err == nil || !strings.Contains(err.Error(), "bits per character") {
		t.Fatalf("mixed metrics: %v", err)
	}
	// Evaluations alone (no step lines): the loss panel stays empty.
	evalsOnly := fakeRun("ngen", 2, 10, 1)
	evalsOnly.Steps = nil
	if _, err := Render([]Run{{"evals", evalsOnly}}, "png", Options{}); err != nil {
		t.Fatalf("a log of evaluations only: %v", err)
	}
	if _, err := Render(nil, "png", Options{}); err == nil {
		t.Fatal("no runs drawn")
	}
	if _, err := Render(runs, "jpeg", Options{}); err == nil {
		t.Fatal("jpeg drawn")
	}
}

func TestSmooth(t *testing.T) {
	got := smooth(plotter.XYs{{X: 1, Y: 1}, {X: 2, Y: 3}, {X: 3, Y: 5}, {X: 4, Y: 7}}, 2)
	want := []float64{1, 2, 4, 6}
	for i := range want {
		if got[i].Y != want[i] {
			t.Fatalf("smooth: %v, want %v", got, want)
		}
	}
}
