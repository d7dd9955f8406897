//go:build cuda

package cuda

import (
	"fmt"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestModelsCPUThreads runs every model of the suite on the CPU backend
// with one worker thread and with many (the GPU machine's cores), so the
// CPU backend's own splitting of kernels and GEMMs across workers is
// checked at a thread count the 2-core CI machine never reaches; and the
// GPU against the one-thread CPU, so that a difference between the GPU
// and the CPU can be told apart from one between thread counts.
func TestModelsCPUThreads(t *testing.T) {
	gpu := newDevice(t)
	one, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	many, err := cpu.New(cpu.Options{Threads: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer many.Close()
	for _, m := range genModels {
		for _, pair := range []struct {
			what string
			dev  runtime.Device
		}{{"threads=16", many}, {"gpu", gpu}} {
			t.Run(fmt.Sprintf("%s/%s", m.name, pair.what), func(t *testing.T) {
				if why, ok := knownGPUvsCPUGaps[m.name+"/fused=true"]; ok && pair.what == "gpu" {
					t.Skip(why)
				}
				a, err := m.open(m.fused, pair.dev)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				b, err := m.open(m.fused, one)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				compareSteps(t, a, b, m.batch, 1e-3, 1e-5)
			})
		}
	}
}
