//go:build cuda

package cuda

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/codegen"
	"github.com/ngen-ml/ngen/codegen/jit"
	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/models/builds"
	"github.com/ngen-ml/ngen/runtime"
)

// NVRTC on every generated module, which needs libnvrtc but no GPU. A
// GPU older than the committed fatbins' sm_80, or any GPU running a
// package generated without nvcc, loads its kernels through NVRTC, so
// every .cu must compile there, not only with nvcc (which defines more:
// INFINITY from <math.h> once made every module fail under NVRTC).

// nvrtcArchs are the virtual architectures every module must compile for:
// Turing (the oldest the backend supports), Ampere and Hopper.
var nvrtcArchs = []string{"compute_75", "compute_80", "compute_90"}

// nvrtcSources is every committed generated .cu, and the .cu of the
// models codegen/jit's tests compile, fused and unfused.
func nvrtcSources(t *testing.T) map[string]string {
	t.Helper()
	srcs := map[string]string{}
	paths, err := filepath.Glob(filepath.Join("..", "..", "generated", "*", "*.cu"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Fatal("no generated .cu files")
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		srcs["generated/"+filepath.Base(filepath.Dir(p))] = string(b)
	}
	sgd := ir.Optimizer{Kind: "sgd", LR: 0.1, Momentum: 0.9}
	models := map[string]*ir.Model{
		"jit mlp f32 dropout adam": irtest.MLP(ir.F32, 7, 9, 4, 0.2, irtest.Adam),
		"jit mlp f64 sgd":          irtest.MLP(ir.F64, 6, 8, 3, 0, sgd),
		"jit convnet f32":          irtest.ConvNet(ir.F32, 5, irtest.Adam),
		"jit convnet f64":          irtest.ConvNet(ir.F64, 5, sgd),
		"jit deep mlp checkpoint":  irtest.DeepMLP(ir.F32, 6, 8, 5, 3, 0.1, irtest.Adam, 2),
		"jit lstm":                 irtest.DeepLSTM(ir.F32, 4, 3, 5, 2, 3, 0),
		"jit lstm checkpoint":      irtest.DeepLSTM(ir.F64, 4, 3, 5, 2, 3, 1),
	}
	for name, m := range models {
		for _, fuse := range []bool{true, false} {
			src, _ := renderModule(t, m, fuse)
			srcs[fmt.Sprintf("%s fuse=%v", name, fuse)] = src
		}
	}
	// The mixed-precision builds generated/ does not commit, which
	// cmd/train -amp -device cuda hands this backend as CUDA C alone
	// (models/builds, jit.BuildGPU): every seed model in bf16, and in
	// fp16 the models whose fp16 build differs in more than the type
	// (loss scaling in the LSTM's and the gpt's updates, the ConvNet's).
	for _, b := range []struct{ pkg, amp string }{
		{"convnet", "fp16"}, {"convnet_bn", "bf16"}, {"charlm", "bf16"}, {"charlm", "fp16"}, {"rnn", "bf16"},
		{"gpt", "bf16"}, {"gpt", "fp16"}, {"transformer", "bf16"},
	} {
		p, err := builds.Program(b.pkg, b.amp)
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := jit.BuildGPU(p)
		if err != nil {
			t.Fatal(err)
		}
		srcs[fmt.Sprintf("amp %s %s", b.pkg, b.amp)] = m.Source
	}
	return srcs
}

// renderModule is what a package generated without nvcc hands the
// backend: the .cu and the kernels, no fatbin and no PTX.
func renderModule(t *testing.T, m *ir.Model, fuse bool) (string, *runtime.Module) {
	t.Helper()
	p, err := compiler.Compile(m, compiler.Options{Fuse: fuse})
	if err != nil {
		t.Fatal(err)
	}
	body, plan, err := codegen.Kernels(p)
	if err != nil {
		t.Fatal(err)
	}
	src := codegen.CUDA(p, body)
	return src, &runtime.Module{Name: m.Name, Source: src, Kernels: plan.Kernels}
}

// TestNVRTCEveryModule compiles every module for every architecture in
// nvrtcArchs with the backend's own options, and checks that each PTX
// defines the kernels it must.
func TestNVRTCEveryModule(t *testing.T) {
	if testing.Short() {
		t.Skip("NVRTC compiles of every module (-short)")
	}
	srcs := nvrtcSources(t)
	names := make([]string, 0, len(srcs))
	for n := range srcs {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		src := srcs[name]
		// In parallel (NVRTC's programs are independent): this test runs
		// while the README's test command has nothing else to do.
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			for _, arch := range nvrtcArchs {
				opts := nvrtcOptions(arch, src)
				ptx, err := runNVRTC(strings.ReplaceAll(name, " ", "_"), src, opts)
				if err != nil {
					t.Errorf("%s for %s: %v", name, arch, err)
					continue
				}
				if !strings.Contains(ptx, ".target sm_"+strings.TrimPrefix(arch, "compute_")) {
					t.Errorf("%s for %s: PTX names another target", name, arch)
				}
				if n := strings.Count(src, "__global__"); len(ptxEntries(ptx)) != n {
					t.Errorf("%s for %s: %d PTX entries for %d kernels", name, arch, len(ptxEntries(ptx)), n)
				}
			}
		})
	}
}

// TestNoNVCCPackageLoadsThroughNVRTC: a package generated without nvcc
// embeds neither fatbin nor PTX, so Load's only form is NVRTC; that
// compile succeeds for a device older than the fatbins' sm_80 and
// resolves every kernel the module lists. (The load itself needs a GPU:
// TestModelsGPUvsCPU runs the committed packages there.)
func TestNoNVCCPackageLoadsThroughNVRTC(t *testing.T) {
	p, err := compiler.Compile(irtest.MLP(ir.F32, 7, 9, 4, 0.2, irtest.Adam), compiler.Options{Fuse: true})
	if err != nil {
		t.Fatal(err)
	}
	files, err := codegen.Generate(p, codegen.Options{Package: "nonvcc"})
	if err != nil {
		t.Fatal(err)
	}
	for f := range files {
		if strings.HasSuffix(f, ".ptx") || strings.Contains(f, ".fatbin") {
			t.Fatalf("generated without nvcc, yet %s is among the files", f)
		}
	}
	if glue := string(files["nonvcc.go"]); strings.Contains(glue, "go:embed nonvcc.ptx") || strings.Contains(glue, "go:embed nonvcc.fatbin") {
		t.Fatal("the glue embeds a PTX or fatbin that nvcc did not make")
	}
	_, m := renderModule(t, irtest.MLP(ir.F32, 7, 9, 4, 0.2, irtest.Adam), true)
	if string(files["nonvcc.cu"]) != m.Source {
		t.Fatal("the package's .cu differs from the module source the test loads")
	}
	if forms := loadForms(m); !slices.Equal(forms, []string{"NVRTC PTX"}) {
		t.Fatalf("Load would try %q, want only NVRTC", forms)
	}
	with := *m
	with.PTX, with.Fatbin = "ptx", []byte("fatbin")
	if forms := loadForms(&with); !slices.Equal(forms, []string{"fatbin", "PTX", "NVRTC PTX"}) {
		t.Fatalf("with nvcc's images Load would try %q", forms)
	}
	ptx, err := compileNVRTC(m.Name, m.Source, 7, 5)
	if err != nil {
		t.Fatal(err)
	}
	entries := ptxEntries(ptx)
	for _, k := range m.Kernels {
		if !slices.Contains(entries, k.Name) && mangledEntry(k.Name, entries) == "" {
			t.Errorf("kernel %s is not in the NVRTC PTX (entries %q)", k.Name, entries)
		}
	}
}
