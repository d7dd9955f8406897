package scanemu

import (
	"math"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// The emulation's f32 GELU (ngen_emu.h: fast_erff, and the ngen_gelu and
// ngen_gelu_grad that replace preamble.cuh's) against the exact functions.
const geluEmuSrc = `
__global__ void gelu_math(const float *x, float *o, int n) {
  for (int i = 0; i < n; i++) {
    o[3 * i] = ::ngen_emu::fast_erff(x[i]);
    o[3 * i + 1] = ngen_gelu(x[i]);
    o[3 * i + 2] = ngen_gelu_grad(x[i]);
  }
}
`

func TestGeluEmu(t *testing.T) {
	entry := "#define NGEN_EMU 1\n#include \"ngen_emu.h\"\nnamespace {\n#include \"gelu.cu\"\n}\n" +
		"extern \"C\" int ngen_cpu_entry(int k, const ngen_launch *l) {\n" +
		"  NGEN_RUN_SIMPLE(l, gelu_math(NGEN_ARG(l, const float *, 0), NGEN_ARG(l, float *, 1), NGEN_ARG(l, int, 2)));\n}\n"
	P := runtime.ArgPtr
	m, err := cpu.CompileModule("geluemu", map[string]string{"gelu.cu": geluEmuSrc, "entry.cc": entry}, "entry.cc",
		[]runtime.KernelInfo{{Name: "gelu_math", Params: []runtime.ArgKind{P, P, runtime.ArgI32}}})
	if err != nil {
		t.Fatal(err)
	}
	d, err := cpu.New(cpu.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	l, err := d.Load(m)
	if err != nil {
		t.Fatal(err)
	}
	var xs []float32
	for x := -12.0; x <= 12; x += 0.00731 {
		xs = append(xs, float32(x))
	}
	// Both sides of the erf's two pieces (|x| = 0.927734375), and zero.
	xs = append(xs, 0, 1e-30, -1e-30, 0.927734375, -0.927734375, 0.92773432, 0.9277344)
	one := runtime.Dim3{X: 1, Y: 1, Z: 1}
	px, po := upload(t, d, xs), upload(t, d, make([]float32, 3*len(xs)))
	launch(t, d, l, 0, one, one, 0, px, po, int32(len(xs)))
	o := download[float32](t, d, po, 3*len(xs))
	for i, x32 := range xs {
		x := float64(x32)
		erf := math.Erf(x)
		// erf within 2 f32 ulp; GELU and its gradient within what rounding
		// of 1 + erf to f32 costs (about 1e-7 absolute, times |x|).
		if got := float64(o[3*i]); math.Abs(got-erf) > 2.5e-7*math.Abs(erf)+1e-38 || math.IsNaN(got) {
			t.Errorf("erf(%v) = %v, want %v", x, got, erf)
		}
		phi := 0.5 * (1 + math.Erf(x/math.Sqrt2))
		gelu, grad := x*phi, phi+x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi)
		if got := float64(o[3*i+1]); math.Abs(got-gelu) > 4e-7*math.Abs(gelu)+1.2e-7*math.Abs(x) {
			t.Errorf("gelu(%v) = %v, want %v", x, got, gelu)
		}
		if got := float64(o[3*i+2]); math.Abs(got-grad) > 4e-7*math.Abs(grad)+1.2e-7*(1+math.Abs(x)) {
			t.Errorf("gelu_grad(%v) = %v, want %v", x, got, grad)
		}
	}
}
