package graph

import (
	"bytes"
	"fmt"
	"html"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/codegen"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/compiler/ops"
	"github.com/ngen-ml/ngen/dsl/eval"
	rt "github.com/ngen-ml/ngen/runtime"
)

// drawing is a DOT picture taken apart: per step cluster, the bold name
// in its label and the other launches' names in its tooltip.
type drawing struct {
	dot    string
	name   map[int]string   // step index → bold name
	also   map[int][]string // step index → names of the copies it stands for
	phases map[int]string   // step index → phase cluster it sits in
}

var (
	clusterRe = regexp.MustCompile(`subgraph cluster_s(\d+) \{\n\s*label=<<B>([^<]*)</B>[^\n]*tooltip="([^"]*)"`)
	phaseRe   = regexp.MustCompile(`subgraph cluster_(forward|backward|optimizer) \{`)
)

func parse(t *testing.T, dot []byte) drawing {
	t.Helper()
	d := drawing{dot: string(dot), name: map[int]string{}, also: map[int][]string{}, phases: map[int]string{}}
	phaseAt := phaseRe.FindAllStringSubmatchIndex(d.dot, -1)
	for _, m := range clusterRe.FindAllStringSubmatchIndex(d.dot, -1) {
		var i int
		fmt.Sscan(d.dot[m[2]:m[3]], &i)
		if _, dup := d.name[i]; dup {
			t.Fatalf("step %d drawn twice", i)
		}
		d.name[i] = html.UnescapeString(d.dot[m[4]:m[5]])
		if tip := d.dot[m[6]:m[7]]; strings.HasPrefix(tip, `also launched as:\n`) {
			d.also[i] = strings.Split(strings.TrimPrefix(tip, `also launched as:\n`), `\n`)
		}
		for _, p := range phaseAt {
			if p[0] < m[0] {
				d.phases[i] = d.dot[p[2]:p[3]]
			}
		}
	}
	return d
}

// stepFunc is the plan's training step with its kernels, as DOT sees it.
func stepFunc(t *testing.T, p *compiler.Program) (*rt.Plan, *rt.Func) {
	t.Helper()
	_, plan, err := codegen.Kernels(p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range plan.Funcs {
		if plan.Funcs[i].Name == "step" {
			return plan, &plan.Funcs[i]
		}
	}
	t.Fatal("no step function")
	return nil, nil
}

func compile(t *testing.T, m *ir.Model, fuse bool) *compiler.Program {
	t.Helper()
	p, err := compiler.Compile(m, compiler.Options{Fuse: fuse, RefBatch: 32})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDOTNamesEveryLaunch: unfolded, the picture has one cluster per
// device call of the training step, named by its label, and names every
// kernel launch exactly once; each sits in its phase's region; every
// parameter is drawn as one; edges between kernels carry dtype and shape.
func TestDOTNamesEveryLaunch(t *testing.T) {
	for _, c := range []struct {
		name string
		m    *ir.Model
	}{
		{"mlp", irtest.MLP(ir.F32, 12, 16, 4, 0.2, irtest.Adam)},
		{"convnet", irtest.ConvNet(ir.F32, 10, irtest.Adam)},
		{"lstm", irtest.DeepLSTM(ir.F32, 5, 3, 8, 2, 4, 0)},
	} {
		for _, fuse := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fuse=%v", c.name, fuse), func(t *testing.T) {
				p := compile(t, c.m, fuse)
				dot, err := DOT(p, Options{NoFold: true})
				if err != nil {
					t.Fatal(err)
				}
				for range 4 { // nothing depends on map order
					again, err := DOT(p, Options{NoFold: true})
					if err != nil || !bytes.Equal(again, dot) {
						t.Fatalf("a second DOT of the same program differs (%v)", err)
					}
				}
				d := parse(t, dot)
				plan, fn := stepFunc(t, p)
				if len(d.name) != len(fn.Steps) {
					t.Fatalf("%d step clusters for %d steps", len(d.name), len(fn.Steps))
				}
				for i := range fn.Steps {
					st := &fn.Steps[i]
					want := rt.StepLabel(plan, st)
					if d.name[i] != want {
						t.Errorf("step %d drawn as %q, want %q", i, d.name[i], want)
					}
					if st.Kind != rt.LaunchStep {
						continue
					}
					if n := strings.Count(d.dot, "<B>"+html.EscapeString(want)+"</B>"); n != 1 {
						t.Errorf("launch %d (%s) named %d times", i, want, n)
					}
					wantPhase := "forward"
					if fn.UpdateFrom > 0 && i >= fn.UpdateFrom || st.Builtin == rt.GuardKernel || st.Builtin == rt.UpdateCheckKernel {
						wantPhase = "optimizer"
					} else if strings.HasSuffix(want, "_bwd") || strings.Contains(want, "_bwd_") {
						wantPhase = "backward"
					}
					if d.phases[i] != wantPhase {
						t.Errorf("launch %d (%s) in the %s region, want %s", i, want, d.phases[i], wantPhase)
					}
				}
				for _, v := range p.Step.Values {
					if v.Role == ir.Param && !strings.Contains(d.dot, fmt.Sprintf("v%d [label=\"param %s\\n%s\", shape=box3d", v.ID, v.Name, v.Type())) {
						t.Errorf("parameter %s not drawn as one", v.Name)
					}
				}
				if !strings.Contains(d.dot, `label="f32[B,`) {
					t.Error("no edge carries a dtype and a batch-sized shape")
				}
			})
		}
	}
}

// TestFoldDeepMLP: repeated layers fold by structure (today's kernels are
// per layer): the deep MLPs of 4 and 8 hidden layers draw the same number
// of steps, and the folded picture still names every launch exactly once,
// the copies in their cluster's tooltip.
func TestFoldDeepMLP(t *testing.T) {
	drawn := map[int]int{}
	for _, layers := range []int{4, 8} {
		p := compile(t, irtest.DeepMLP(ir.F32, 12, 16, layers, 4, 0.1, irtest.Adam, 0), true)
		dot, err := DOT(p, Options{})
		if err != nil {
			t.Fatal(err)
		}
		d := parse(t, dot)
		plan, fn := stepFunc(t, p)
		drawn[layers] = len(d.name)
		if len(d.name) >= len(fn.Steps) {
			t.Fatalf("%d layers: %d of %d steps drawn: nothing folded", layers, len(d.name), len(fn.Steps))
		}
		if want := fmt.Sprintf("<B>×%d</B> identical runs", layers-1); !strings.Contains(d.dot, want) {
			t.Errorf("%d layers: no %q", layers, want)
		}
		count := map[string]int{}
		for i, n := range d.name {
			count[n]++
			for _, a := range d.also[i] {
				count[a]++
			}
		}
		for i := range fn.Steps {
			st := &fn.Steps[i]
			if st.Kind != rt.LaunchStep {
				continue
			}
			if l := rt.StepLabel(plan, st); count[l] != 1 {
				t.Errorf("%d layers: launch %d (%s) named %d times", layers, i, l, count[l])
			}
		}
		// The folded parameters are drawn once, spanning the layers.
		if !strings.Contains(d.dot, fmt.Sprintf(`param fc{2…%d}.weight (×%d)`, layers, layers-1)) {
			t.Errorf("%d layers: the folded weights are not drawn as one node", layers)
		}
	}
	if drawn[4] != drawn[8] {
		t.Errorf("drawn steps grow with depth: %v", drawn)
	}
}

// TestFoldSegment: the runs chosen on class sequences.
func TestFoldSegment(t *testing.T) {
	for _, c := range []struct {
		s      []int
		starts string // layer starts, as 1s
		want   string
	}{
		{[]int{0, 1, 2, 1, 2, 1, 2, 3}, "10101010", "[{1 2 3}]"},
		{[]int{0, 1, 2, 3}, "1111", "[]"},
		// Single steps repeated do not fold: a unit is at least two steps.
		{[]int{5, 5, 5, 5}, "1111", "[]"},
		// Equal cost either way: fold where a layer starts, else as
		// early as possible.
		{[]int{9, 1, 2, 1, 2, 1}, "001010", "[{2 2 2}]"},
		{[]int{9, 1, 2, 1, 2, 1}, "010100", "[{1 2 2}]"},
		{[]int{9, 1, 2, 1, 2, 1}, "000000", "[{1 2 2}]"},
		// A unit that repeats a shorter one is that one: 4 = 2×2.
		{[]int{1, 2, 1, 2, 1, 2, 1, 2}, "10101010", "[{0 2 4}]"},
		// Two folded runs in one phase.
		{[]int{1, 2, 1, 2, 7, 3, 4, 3, 4, 3, 4}, "10100101010", "[{0 2 2} {5 2 3}]"},
	} {
		starts := make([]bool, len(c.starts))
		for i, ch := range c.starts {
			starts[i] = ch == '1'
		}
		if got := fmt.Sprint(foldSegment(c.s, starts)); got != c.want {
			t.Errorf("foldSegment(%v, %s) = %s, want %s", c.s, c.starts, got, c.want)
		}
	}
}

// TestFoldByKernelIdentity: once layers share kernels (one Plan.Kernels
// entry, launched by many steps), steps with the same kernel fold even
// when nothing else says they are alike; GEMMs by their shapes.
func TestFoldByKernelIdentity(t *testing.T) {
	plan := &rt.Plan{Kernels: []rt.KernelInfo{{Name: "linear_bias_relu"}, {Name: "head"}}, Buffers: []rt.Buffer{{Name: "c", Role: "temp"}}}
	gemm := rt.Step{Kind: rt.GemmStep, Gemm: rt.Gemm{M: rt.Size{Mul: 1, Syms: []string{"B"}}, N: rt.Size{Mul: 16}, K: rt.Size{Mul: 16}}}
	var steps []step
	for l := 0; l < 3; l++ {
		// Each launch carries its layer's ops text, so only the kernel
		// index makes them alike.
		steps = append(steps,
			step{st: &gemm, phase: forward},
			step{st: &rt.Step{Kind: rt.LaunchStep, Kernel: 0, Ops: fmt.Sprintf("layer %d", l)}, phase: forward})
	}
	steps = append(steps, step{st: &rt.Step{Kind: rt.LaunchStep, Kernel: 1, Ops: "head"}, phase: forward})
	m := &model{plan: plan, steps: steps}
	cl := m.classes()
	if cl[1] != cl[3] || cl[3] != cl[5] || cl[0] != cl[2] || cl[0] == cl[1] || cl[6] == cl[1] {
		t.Fatalf("classes %v: want the shared kernel's launches and the equal GEMMs alike", cl)
	}
	f := findFolds(m)
	if len(f.blocks) != 1 || f.blocks[0] != (block{0, 2, 3}) {
		t.Fatalf("folds %v, want one run of 2 steps ×3", f.blocks)
	}
	if got := f.copies(1); fmt.Sprint(got) != "[1 3 5]" {
		t.Fatalf("copies of step 1: %v", got)
	}
}

// TestGPTPicture: the seed gpt (models/transformer) draws its attention
// and layer norms in their colours, folds its identical blocks in both
// directions, and still names every launch exactly once.
func TestGPTPicture(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	all, err := eval.Models(filepath.Join(filepath.Dir(file), "..", "..", "models", "transformer", "model.go"))
	if err != nil {
		t.Fatal(err)
	}
	var gpt *ir.Model
	for _, m := range all {
		if m.Name == "gpt" {
			gpt = m
		}
	}
	if gpt == nil {
		t.Fatal("models/transformer declares no gpt")
	}
	p := compile(t, gpt, true)
	dot, err := DOT(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := parse(t, dot)
	plan, fn := stepFunc(t, p)
	for _, c := range []category{catGEMM, catElementwise, catReduction, catAttention} {
		if !strings.Contains(d.dot, "fillcolor="+quote(colours[c].fill)+"; color="+quote(colours[c].border)) {
			t.Errorf("no %s kernel drawn in its colour", catNames[c])
		}
	}
	if n := strings.Count(d.dot, "identical runs of"); n != 2 {
		t.Errorf("%d folded runs, want one forward and one backward", n)
	}
	count := map[string]int{}
	for i, n := range d.name {
		count[n]++
		for _, a := range d.also[i] {
			count[a]++
		}
	}
	for i := range fn.Steps {
		if st := &fn.Steps[i]; st.Kind == rt.LaunchStep {
			if l := rt.StepLabel(plan, st); count[l] != 1 {
				t.Errorf("launch %d (%s) named %d times", i, l, count[l])
			}
		}
	}
	t.Logf("gpt: %d of %d steps drawn", len(d.name), len(fn.Steps))
}

// TestRender: with Graphviz, SVG and PNG come out non-empty and of their
// kind; without it, Render says what to install.
func TestRender(t *testing.T) {
	dot, err := DOT(compile(t, irtest.MLP(ir.F32, 12, 16, 4, 0.2, irtest.Adam), true), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("dot"); err != nil {
		if _, err := Render(dot, "svg"); err != ErrNoGraphviz {
			t.Fatalf("without dot: %v, want ErrNoGraphviz", err)
		}
		t.Skip("graphviz's dot is not on PATH (bash scripts/setup.sh installs it): SVG and PNG not rendered")
	}
	svg, err := Render(dot, "svg")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("fc1_bias_relu_dropout_fwd")) {
		t.Fatalf("SVG of %d bytes without <svg or the first kernel", len(svg))
	}
	png, err := Render(dot, "png")
	if err != nil {
		t.Fatal(err)
	}
	if len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("PNG of %d bytes", len(png))
	}
	if _, err := Render(dot, "gif"); err == nil {
		t.Fatal("Render to gif accepted")
	}
	if _, err := FormatOf("g.jpeg"); err == nil || !strings.Contains(err.Error(), ".svg, .png or .dot") {
		t.Fatalf("FormatOf(g.jpeg): %v", err)
	}
}

// TestDOTRecurrenceForms: a recurrence's step says how its GPU form runs
// the loop: inside one launch (the loop form), or a launch a time step
// (stepped: T forward, T+1 backward).
func TestDOTRecurrenceForms(t *testing.T) {
	m := irtest.DeepLSTM(ir.F32, 5, 3, 8, 2, 4, 0) // T = 5
	for _, c := range []struct {
		form ops.StepForm
		want []string
	}{
		{ops.StepNever, []string{"5 time steps inside"}},
		{ops.StepAlways, []string{"5 time steps, 5 GPU launches", "5 time steps, 6 GPU launches"}},
	} {
		p, err := compiler.Compile(m, compiler.Options{Fuse: true, RefBatch: 32, StepForm: c.form})
		if err != nil {
			t.Fatal(err)
		}
		dot, err := DOT(p, Options{NoFold: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range c.want {
			if !strings.Contains(string(dot), w) {
				t.Errorf("form %v: the picture does not say %q", c.form, w)
			}
		}
		if c.form == ops.StepNever && strings.Contains(string(dot), "GPU launches") {
			t.Errorf("the loop form drawn as stepped")
		}
	}
}
