package codegen

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/dsl/eval"
	_ "github.com/ngen-ml/ngen/generated/all"
	"github.com/ngen-ml/ngen/runtime"
)

// measuredStep is one row of testdata/gpu_measured.tsv: a training step
// timed on a GPU.
type measuredStep struct {
	pkg    string
	batch  int
	gpu    string
	graphs bool
	ms     float64
	where  string
	known  string // why the model misses this row, if it is known to
	// form is the recurrences' GPU form the measured build ran (the
	// eighth column, ngen build -loop-form's spelling; empty: the
	// package's own): a measurement of an older form is modeled in it.
	form ops.StepForm
}

// readMeasured parses testdata/gpu_measured.tsv.
func readMeasured(t *testing.T) []measuredStep {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "gpu_measured.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []measuredStep
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		c := strings.Split(line, "\t")
		if len(c) < 6 {
			t.Fatalf("gpu_measured.tsv:%d: %d columns, want at least 6", n, len(c))
		}
		m := measuredStep{pkg: c[0], gpu: c[2], graphs: c[3] == "true", where: c[5]}
		if len(c) > 6 {
			m.known = c[6]
		}
		if len(c) > 7 {
			if m.form, err = ops.ParseStepForm(c[7]); err != nil {
				t.Fatalf("gpu_measured.tsv:%d: %v", n, err)
			}
		}
		if m.batch, err = strconv.Atoi(c[1]); err != nil {
			t.Fatalf("gpu_measured.tsv:%d: batch: %v", n, err)
		}
		if m.ms, err = strconv.ParseFloat(c[4], 64); err != nil {
			t.Fatalf("gpu_measured.tsv:%d: ms: %v", n, err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// defaultBenchBatch is the batch of a model no GPU benchmark has measured:
// cmd/train's default.
const defaultBenchBatch = 64

// registered are this repository's generated packages, by name.
func registered(t *testing.T) map[string]*runtime.Generated {
	t.Helper()
	out := map[string]*runtime.Generated{}
	for _, g := range runtime.RegisteredAll() {
		if strings.HasPrefix(g.Path, "github.com/ngen-ml/ngen/generated/") {
			out[g.Name] = g
		}
	}
	if len(out) == 0 {
		t.Fatal("no generated package is registered")
	}
	return out
}

var dslModels sync.Map // source file → []*ir.Model, parsed once per test binary

// reportFor compiles a registered package's model as its package was
// generated (fused or not), its loops in form, at batch and reports one
// training step.
func reportFor(t *testing.T, g *runtime.Generated, batch int, form ops.StepForm) *Report {
	t.Helper()
	ms, ok := dslModels.Load(g.Source)
	if !ok {
		parsed, err := eval.Models(filepath.Join("..", g.Source))
		if err != nil {
			t.Fatal(err)
		}
		dslModels.Store(g.Source, parsed)
		ms = parsed
	}
	for _, m := range ms.([]*ir.Model) {
		if m.Name != g.Model {
			continue
		}
		p, err := compiler.Compile(m, compiler.Options{Fuse: g.Fused(), RefBatch: batch, StepForm: form})
		if err != nil {
			t.Fatalf("%s: %v", g.Name, err)
		}
		r, err := MakeReport(p)
		if err != nil {
			t.Fatalf("%s: %v", g.Name, err)
		}
		return r
	}
	t.Fatalf("%s: no model %q in %s", g.Name, g.Model, g.Source)
	return nil
}

// TestGPUModelVsMeasured holds ngen report -gpu's modeled step within 1.5×
// of every training step measured on a GPU (testdata/gpu_measured.tsv),
// fused and unfused. A row marked known is logged, not failed: its reason
// says why the model misses it.
func TestGPUModelVsMeasured(t *testing.T) {
	reg := registered(t)
	for _, m := range readMeasured(t) {
		g, ok := reg[m.pkg]
		if !ok {
			t.Errorf("gpu_measured.tsv: no registered package %q", m.pkg)
			continue
		}
		r := reportFor(t, g, m.batch, m.form)
		if err := r.ModelGPU(m.gpu, GPUOptions{Graphs: m.graphs}); err != nil {
			t.Fatal(err)
		}
		model := r.GPUModelUs / 1000
		ratio := model / m.ms
		t.Logf("%-20s batch %3d on %s: modeled %7.3f ms (host %.3f, calls %.3f, kernels %.3f), measured %7.3f ms: %.2f×",
			m.pkg, m.batch, m.gpu, model, r.GPU.HostUs/1000, (r.GPU.OverheadUs-r.GPU.HostUs)/1000, r.GPU.KernelUs/1000, m.ms, ratio)
		// The model's constants are calibrated on a few of these rows,
		// not fitted per model: 1.5× is the bound.
		if ratio > 1.5 || ratio < 1/1.5 {
			if m.known != "" {
				t.Logf("  known miss: %s", m.known)
				continue
			}
			t.Errorf("%s batch %d on %s: modeled %.3f ms, measured %.3f ms (%s): %.2f×, want within 1.5×", m.pkg, m.batch, m.gpu, model, m.ms, m.where, ratio)
		}
	}
}

// TestMeasuredInPerfDoc: every measured row appears in docs/PERF.md's
// modeled-against-measured table (package and milliseconds on one line).
func TestMeasuredInPerfDoc(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "PERF.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	for _, m := range readMeasured(t) {
		found := false
		for _, l := range lines {
			if strings.HasPrefix(l, "| "+m.pkg+" |") && strings.Contains(l, "| "+strconv.FormatFloat(m.ms, 'f', -1, 64)+" ms |") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("docs/PERF.md has no table row \"| %s | ... | %v ms | ...\" for testdata/gpu_measured.tsv's measurement", m.pkg, m.ms)
		}
	}
}

// benchBatches is each registered package's benchmark batch: the batch
// of its GPU measurement, else defaultBenchBatch.
func benchBatches(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range readMeasured(t) {
		out[m.pkg] = m.batch
	}
	return out
}

// smStarvedKnown are kernels, by model (fused and unfused packages
// alike) and kernel name, that move 1 MB or more on fewer than half the
// SMs at the benchmark shapes and are not fixed yet (issue 26, item 3):
// each entry says what the kernel is and what it needs. Remove an entry
// when its kernel is reshaped; a kernel not listed fails the test.
var smStarvedKnown = map[string]string{}

// TestGPUModelFillsEverySeedModel extends TestGPUModel's occupancy check
// to every registered package (fused and unfused) at its benchmark batch:
// no kernel moving 1 MB or more leaves more than half of an H100's or
// A100's SMs idle, except the known ones above, which are logged.
func TestGPUModelFillsEverySeedModel(t *testing.T) {
	batches := benchBatches(t)
	reg := registered(t)
	used := map[string]bool{}
	for name, g := range reg {
		batch, ok := batches[name]
		if !ok {
			batch = defaultBenchBatch
		}
		r := reportFor(t, g, batch, ops.StepAuto)
		for _, gpu := range []string{"h100", "a100"} {
			for _, s := range r.SMStarved(gpu, 1<<20) {
				msg := fmt.Sprintf("%s (batch %d) on %s: %s (%s: %s) moves %d bytes on %d blocks, fewer than half the %d SMs", name, batch, gpu, s.Kernel, s.Label, s.Ops, s.Bytes, s.Blocks, GPUs[gpu].SMs)
				key := strings.TrimSuffix(name, "_unfused") + "/" + s.Kernel
				if why, ok := smStarvedKnown[key]; ok {
					used[key] = true
					t.Logf("known: %s: %s", msg, why)
					continue
				}
				t.Error(msg)
			}
		}
	}
	for key := range smStarvedKnown {
		if !used[key] {
			t.Errorf("smStarvedKnown lists %s, which now fills the GPU: remove the entry", key)
		}
	}
}
