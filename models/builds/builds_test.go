package builds

import (
	"strings"
	"testing"

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
