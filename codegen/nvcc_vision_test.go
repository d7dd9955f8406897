package codegen

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

// TestNVCCVision compiles the kernels of irtest.ConvNet with nvcc for
// sm_80 and sm_90, every warning an error: its layers reach the gather
// templates' paths that the committed ConvNets do not (groups, dilation,
// padding 2, strided non-square kernels, overlapping max pooling, average
// pooling, col2im fused with a ReLU backward).
func TestNVCCVision(t *testing.T) {
	nvcc, err := exec.LookPath("nvcc")
	if err != nil {
		t.Skip("nvcc not on PATH: run the README's test command to install the CUDA toolkit")
	}
	// Both dtypes and both plans, in two nvcc runs of about 3 s each.
	for _, c := range []struct {
		dt   ir.DType
		fuse bool
	}{{ir.F32, true}, {ir.F64, false}} {
		name := fmt.Sprintf("%s_fuse=%v", c.dt, c.fuse)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p, err := compiler.Compile(irtest.ConvNet(c.dt, 3, irtest.Adam), compiler.Options{Fuse: c.fuse})
			if err != nil {
				t.Fatal(err)
			}
			body, _, err := Kernels(p)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			cu := filepath.Join(dir, "k.cu")
			if err := os.WriteFile(cu, []byte(CUDA(p, body)), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, err := nvccDevice(nvcc, cu, dir); err != nil || len(out) > 0 {
				t.Errorf("nvcc %s: %v\n%s", name, err, out)
			}
		})
	}
}
