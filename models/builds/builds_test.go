package builds

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ops"
	_ "github.com/ngen-ml/ngen/generated/lstmbench"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestRegisterGPU: a GPU build is the .cu and the kernels alone, under
// its own name; a second call returns the first registration; a CPU
// device refuses its module and says why; an unknown package or type is
// an error naming it.
func TestRegisterGPU(t *testing.T) {
	g, err := Register("gpt", "bf16", GPU)
	if err != nil {
		t.Fatal(err)
	}
	if g.Name != "gpt_bf16_gpu" {
		t.Fatalf("name %q", g.Name)
	}
	m := g.Module()
	if m.CPUEntry != nil || !strings.Contains(m.Source, "__nv_bfloat16") || len(m.Kernels) == 0 || len(m.Kernels) != len(g.Plan.Kernels) {
		t.Fatalf("module: CPU entry %v, %d bytes of CUDA C, %d kernels (plan %d)", m.CPUEntry, len(m.Source), len(m.Kernels), len(g.Plan.Kernels))
	}
	again, err := Register("gpt", "bf16", GPU)
	if err != nil || again != g {
		t.Fatalf("second call: %p %v, want the first registration %p", again, err, g)
	}
	dev, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if _, err := g.New(dev, runtime.SessionOptions{MaxBatch: 2}); err == nil || !strings.Contains(err.Error(), "no CPUEntry") {
		t.Fatalf("a CPU device opened a GPU build: %v", err)
	}
	if _, err := Register("nosuch", "bf16", GPU); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("unknown package: %v", err)
	}
	if _, err := Register("mlp", "fp8", GPU); err == nil || !strings.Contains(err.Error(), "fp8") {
		t.Fatalf("unknown type: %v", err)
	}
}

// TestRegisterForm: the LSTM LM compiled with its recurrences in each GPU
// form. The loop form has no stepped kernel; the stepped form's four
// recurrences are stepped (T launches forward, T+1 backward), as the
// generated package's are by default, whose plan it otherwise matches
// step for step; an unknown package is an error naming it.
func TestRegisterForm(t *testing.T) {
	pkg, err := runtime.Registered("lstmbench")
	if err != nil {
		t.Fatal(err)
	}
	steps := func(g *runtime.Generated) (n int) {
		for _, k := range g.Plan.Kernels {
			if k.Steps > 0 {
				n++
			}
		}
		return n
	}
	loop, err := RegisterForm("lstmbench", ops.StepNever)
	if err != nil {
		t.Fatal(err)
	}
	stepped, err := RegisterForm("lstmbench", ops.StepAlways)
	if err != nil {
		t.Fatal(err)
	}
	if loop.Name != "lstmbench_loop_gpu" || stepped.Name != "lstmbench_stepped_gpu" {
		t.Fatalf("names %q and %q", loop.Name, stepped.Name)
	}
	if n := steps(loop); n != 0 {
		t.Errorf("the loop form has %d stepped kernels", n)
	}
	if n, want := steps(stepped), steps(pkg); n != 2 || want != 2 {
		t.Errorf("stepped kernels: %d in the stepped build, %d in the package, want 2 (forward and backward scans)", n, want)
	}
	for _, g := range []*runtime.Generated{loop, stepped} {
		for i, f := range g.Plan.Funcs {
			if len(f.Steps) != len(pkg.Plan.Funcs[i].Steps) {
				t.Errorf("%s.%s: %d steps, the package %d", g.Name, f.Name, len(f.Steps), len(pkg.Plan.Funcs[i].Steps))
			}
		}
	}
	if g := stepped.Module(); !strings.Contains(g.Source, "ngen_launch") || strings.Contains(loop.Module().Source, "ngen_launch") {
		t.Error("the stepped build's source lacks the launch index, or the loop build's has it")
	}
	if _, err := RegisterForm("nosuch", ops.StepNever); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("unknown package: %v", err)
	}
}

// TestRegisterAttentionForm: the gpt in bf16 for a GPU with its attention
// in the CUDA-core form has the same steps as the default build, whose
// attention is the tensor-core form: its source renders no wmma, and no
// step reports tensor-core FLOPs.
func TestRegisterAttentionForm(t *testing.T) {
	tensor, err := Register("gpt", "bf16", GPU)
	if err != nil {
		t.Fatal(err)
	}
	cores, err := RegisterAttentionForm("gpt", "bf16", ops.TensorNever)
	if err != nil {
		t.Fatal(err)
	}
	if cores.Name != "gpt_bf16_cudacores_gpu" {
		t.Fatalf("name %q", cores.Name)
	}
	tensorFlops := func(g *runtime.Generated) (n int) {
		for _, f := range g.Plan.Funcs {
			if f.Name != "step" {
				continue
			}
			for _, s := range f.Steps {
				if len(s.TensorFlops) > 0 {
					n++
				}
			}
		}
		return n
	}
	if n := tensorFlops(tensor); n != 8 {
		t.Errorf("the default build's step: %d steps with tensor-core FLOPs, want 8 (4 layers' attention, forward and backward)", n)
	}
	if n := tensorFlops(cores); n != 0 {
		t.Errorf("the CUDA-core build: %d steps with tensor-core FLOPs", n)
	}
	if !strings.Contains(tensor.Module().Source, "wmma::mma_sync") || strings.Contains(cores.Module().Source, "wmma::") {
		t.Error("the default build's source lacks wmma, or the CUDA-core build's has it")
	}
	for i, f := range cores.Plan.Funcs {
		if len(f.Steps) != len(tensor.Plan.Funcs[i].Steps) {
			t.Errorf("%s: %d steps, the default build %d", f.Name, len(f.Steps), len(tensor.Plan.Funcs[i].Steps))
		}
	}
}
