package bench

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// machine is the line every benchmark prints beside its ratios: the CPU,
// the vector extensions that decide which kernels run (the emulation's
// AVX2 copies, oneDNN's and OpenBLAS's GEMM kernels, PyTorch's), and
// whether OPENBLAS_CORETYPE pins OpenBLAS's. A ratio measured on an
// AVX-512 machine does not hold on an AVX2 one (docs/PERF.md keeps their
// tables apart).
func machine() string {
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return fmt.Sprintf("cpu unknown (%v), %s", err, coretype())
	}
	model, ext := cpuInfo(string(info))
	return fmt.Sprintf("cpu %s, vector extensions %s, %s", model, ext, coretype())
}

// coretype says how OPENBLAS_CORETYPE pins OpenBLAS's kernels, and which
// variables that cap the other libraries' instruction sets are set
// (oneDNN's, in ngen and in PyTorch, and ATen's own vector kernels): an
// AVX-512 machine with them at AVX2 runs every library's AVX2 path.
func coretype() string {
	s := "OPENBLAS_CORETYPE unset"
	if c, ok := os.LookupEnv("OPENBLAS_CORETYPE"); ok {
		s = "OPENBLAS_CORETYPE=" + c
	}
	for _, v := range isaCaps {
		if c, ok := os.LookupEnv(v); ok {
			s += ", " + v + "=" + c
		}
	}
	return s
}

// isaCaps are the variables that hold a library below the CPU's vector
// extensions.
var isaCaps = []string{"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"}

// cpuInfo reads the first processor's model name and its avx512*, avx2
// and fma flags from /proc/cpuinfo's text.
func cpuInfo(text string) (model, ext string) {
	model = "unknown"
	var flags []string
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if model == "unknown" {
				model = strings.TrimSpace(v)
			}
		case "flags":
			if flags == nil {
				flags = strings.Fields(v)
			}
		}
	}
	var avx512, other []string
	for _, f := range flags {
		switch {
		case strings.HasPrefix(f, "avx512"):
			avx512 = append(avx512, f)
		case f == "avx2" || f == "fma":
			other = append(other, f)
		}
	}
	if len(avx512) == 0 {
		avx512 = []string{"(no avx512)"}
	}
	ext = strings.Join(append(other, avx512...), " ")
	if len(other) == 0 && avx512[0] == "(no avx512)" {
		ext = "none of avx2, fma, avx512"
	}
	return model, ext
}

func TestCPUInfo(t *testing.T) {
	for _, c := range []struct{ text, model, ext string }{
		{"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu sse2 fma avx avx2 bmi2\n\nprocessor\t: 1\nmodel name\t: other\nflags\t\t: avx512f\n",
			"AMD EPYC", "fma avx2 (no avx512)"},
		{"model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: sse2 fma avx2 avx512f avx512dq avx512_vnni\n",
			"Intel(R) Xeon(R) Processor", "fma avx2 avx512f avx512dq avx512_vnni"},
		{"flags\t\t: sse sse2\n", "unknown", "none of avx2, fma, avx512"},
	} {
		if m, e := cpuInfo(c.text); m != c.model || e != c.ext {
			t.Errorf("cpuInfo(%q) = %q, %q; want %q, %q", c.text, m, e, c.model, c.ext)
		}
	}
}
