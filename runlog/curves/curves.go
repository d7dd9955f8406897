// Package curves draws training runs read from their logs (package
// runlog) with gonum.org/v1/plot: the training loss per step, raw and
// smoothed, above the validation metric per epoch, one colour per run,
// with each run's throughput in the legend. cmd/train -plot and `ngen
// plot` call it.
package curves

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/ngen-ml/ngen/runlog"
)

// Run is one log to draw, with the name its legend entries start with.
type Run struct {
	Name string
	Log  *runlog.Log
}

// Options shape the picture.
type Options struct {
	// Smooth is the window of the moving mean drawn over the raw losses;
	// 0 picks about a fiftieth of the longest run's steps.
	Smooth int
	// Title is drawn above the loss panel; empty names the runs' models.
	Title string
}

// palette: distinguishable on white, and the first two (ngen, PyTorch)
// far apart.
var palette = []color.RGBA{
	{31, 95, 191, 255},  // blue
	{217, 72, 15, 255},  // orange
	{43, 138, 62, 255},  // green
	{134, 46, 156, 255}, // purple
	{11, 114, 133, 255}, // teal
	{201, 42, 42, 255},  // red
}

func colour(i int, alpha uint8) color.RGBA {
	c := palette[i%len(palette)]
	// Premultiplied alpha: scale the channels with it.
	a := float64(alpha) / 255
	return color.RGBA{uint8(float64(c.R) * a), uint8(float64(c.G) * a), uint8(float64(c.B) * a), alpha}
}

// Render draws runs as "png" or "svg".
func Render(runs []Run, format string, o Options) ([]byte, error) {
	if len(runs) == 0 {
		return nil, fmt.Errorf("curves: no runs to draw")
	}
	loss, metric, err := plots(runs, o)
	if err != nil {
		return nil, err
	}
	const w, h = 9 * vg.Inch, 8 * vg.Inch
	var canvas vg.CanvasWriterTo
	switch format {
	case "png":
		canvas = vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(120), vgimg.UseBackgroundColor(color.White))}
	case "svg":
		canvas = vgsvg.New(w, h)
	default:
		return nil, fmt.Errorf("curves: cannot draw %q: want png or svg", format)
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12), PadY: vg.Points(18)}
	cs := plot.Align([][]*plot.Plot{{loss}, {metric}}, tiles, dc)
	loss.Draw(cs[0][0])
	metric.Draw(cs[1][0])
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("curves: %v", err)
	}
	return buf.Bytes(), nil
}

// plots builds the two panels.
func plots(runs []Run, o Options) (loss, metric *plot.Plot, err error) {
	longest := 0
	for _, r := range runs {
		longest = max(longest, len(r.Log.Steps))
	}
	win := o.Smooth
	if win <= 0 {
		win = max(1, longest/50)
	}
	loss = plot.New()
	title := o.Title
	if title == "" {
		var models []string
		for _, r := range runs {
			if m := r.Log.Run.Model; m != "" && !contains(models, m) {
				models = append(models, m)
			}
		}
		title = strings.Join(models, ", ")
	}
	loss.Title.Text = fmt.Sprintf("%s: training loss per step (thin: each step; thick: mean of %d steps)", title, win)
	if win == 1 {
		loss.Title.Text = title + ": training loss per step"
	}
	loss.X.Label.Text = "step"
	loss.Y.Label.Text = "loss"
	loss.Legend.Top = true
	loss.Add(plotter.NewGrid())
	metric = plot.New()
	metric.X.Label.Text = "epoch"
	metric.Legend.Top = true
	metric.Add(plotter.NewGrid())
	metricName := ""
	drawn := 0
	// Every run's raw line goes under every smoothed one.
	var raws, smooths []plot.Plotter
	for i, r := range runs {
		steps := r.Log.Steps
		if len(steps) > 0 {
			raw := make(plotter.XYs, len(steps))
			for k, s := range steps {
				// The log scale takes positive values only; a loss is
				// never below 0, and 1e-6 is far below any plotted.
				raw[k] = plotter.XY{X: float64(s.Step), Y: math.Max(s.Loss, 1e-6)}
			}
			l, err := plotter.NewLine(raw)
			if err != nil {
				return nil, nil, fmt.Errorf("curves: %s: %v", r.Name, err)
			}
			l.LineStyle.Color, l.LineStyle.Width = colour(i, 70), vg.Points(0.5)
			sm, err := plotter.NewLine(smooth(raw, win))
			if err != nil {
				return nil, nil, fmt.Errorf("curves: %s: %v", r.Name, err)
			}
			sm.LineStyle.Color, sm.LineStyle.Width = colour(i, 255), vg.Points(2)
			raws, smooths = append(raws, l), append(smooths, sm)
			loss.Legend.Add(fmt.Sprintf("%s: %s", r.Name, throughput(r.Log)), sm)
		}
		// A run's metric is its first evaluation's (a sequence classifier
		// adds a test accuracy at the end to its validation accuracies).
		var pts plotter.XYs
		if len(r.Log.Evals) > 0 {
			name, _, ok := r.Log.Evals[0].Metric()
			if ok && metricName == "" {
				metricName = name
			}
			if ok && name != metricName {
				return nil, nil, fmt.Errorf("curves: %s measures %s, an earlier run %s: draw them apart", r.Name, name, metricName)
			}
		}
		for _, e := range r.Log.Evals {
			v, ok := e.Value(metricName)
			if !ok {
				continue
			}
			if strings.HasSuffix(metricName, "accuracy") {
				v *= 100
			}
			pts = append(pts, plotter.XY{X: float64(e.Epoch), Y: v})
		}
		if len(pts) > 0 {
			l, s, err := plotter.NewLinePoints(pts)
			if err != nil {
				return nil, nil, fmt.Errorf("curves: %s: %v", r.Name, err)
			}
			l.LineStyle.Color, l.LineStyle.Width = colour(i, 255), vg.Points(2)
			s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = colour(i, 255), vg.Points(3), draw.CircleGlyph{}
			metric.Add(l, s)
			last := pts[len(pts)-1].Y
			unit := "%"
			if !strings.HasSuffix(metricName, "accuracy") {
				unit = ""
			}
			metric.Legend.Add(fmt.Sprintf("%s: %.4g%s after epoch %d", r.Name, last, unit, int(pts[len(pts)-1].X)), l, s)
		}
		if len(steps) > 0 || len(pts) > 0 {
			drawn++
		}
	}
	if drawn == 0 {
		return nil, nil, fmt.Errorf("curves: the logs hold no steps and no evaluations")
	}
	loss.Add(raws...)
	loss.Add(smooths...)
	if longest > 0 {
		// A log scale shows the first steps' fall and the late
		// differences between runs in one panel.
		loss.Y.Scale, loss.Y.Tick.Marker = plot.LogScale{}, logTicks{}
		loss.Y.Label.Text = "loss (log scale)"
	}
	if metricName == "" {
		metricName = "no evaluation logged"
	}
	metric.Title.Text = metricName + " per epoch"
	metric.Y.Label.Text = metricName
	if strings.HasSuffix(metricName, "accuracy") {
		metric.Y.Label.Text += " (%)"
	}
	metric.X.Tick.Marker = integerTicks{}
	lastEpoch := 1
	for _, r := range runs {
		for _, e := range r.Log.Evals {
			lastEpoch = max(lastEpoch, e.Epoch)
		}
	}
	metric.X.Min, metric.X.Max = 0.5, float64(lastEpoch)+0.5
	// An accuracy rises to the right, bits per character fall: the legend
	// goes where the curves are not.
	metric.Legend.Top = !strings.HasSuffix(metricName, "accuracy")
	sans(loss)
	sans(metric)
	return loss, metric, nil
}

// sans sets every text of p in Liberation Sans.
func sans(p *plot.Plot) {
	set := func(f *font.Font) { f.Typeface, f.Variant = "Liberation", "Sans" }
	set(&p.Title.TextStyle.Font)
	p.Title.TextStyle.Font.Size = vg.Points(13)
	set(&p.Legend.TextStyle.Font)
	p.Legend.TextStyle.Font.Size = vg.Points(11)
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		set(&a.Label.TextStyle.Font)
		set(&a.Tick.Label.Font)
	}
}

// smooth is the trailing moving mean of xy's Y over win points.
func smooth(xy plotter.XYs, win int) plotter.XYs {
	out := make(plotter.XYs, len(xy))
	sum := 0.0
	for i, p := range xy {
		sum += p.Y
		if i >= win {
			sum -= xy[i-win].Y
		}
		out[i] = plotter.XY{X: p.X, Y: sum / float64(min(i+1, win))}
	}
	return out
}

// throughput is the run's mean training throughput over its epochs
// (from its eval lines, else its steps).
func throughput(l *runlog.Log) string {
	sum, n := 0.0, 0
	seen := map[int]bool{} // an epoch with two evaluations (validation, then test) counts once
	for _, e := range l.Evals {
		if e.SamplesPerS > 0 && !seen[e.Epoch] {
			seen[e.Epoch] = true
			sum += e.SamplesPerS
			n++
		}
	}
	if n == 0 {
		for _, s := range l.Steps {
			if s.SamplesPerS > 0 && !math.IsInf(s.SamplesPerS, 0) {
				sum += s.SamplesPerS
				n++
			}
		}
	}
	if n == 0 {
		return "throughput not logged"
	}
	return fmt.Sprintf("%.0f samples/s", sum/float64(n))
}

// logTicks marks 1, 2, 3 and 5 times the powers of ten in range, with
// labels, and the other whole multiples without.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		p := math.Pow(10, e)
		for m := 1; m <= 9; m++ {
			v := float64(m) * p
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 3 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', 3, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// integerTicks marks whole epochs only.
type integerTicks struct{}

func (integerTicks) Ticks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	step := math.Max(1, math.Ceil((hi-lo)/10))
	for v := math.Ceil(lo); v <= hi; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprint(v)})
	}
	return ts
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
