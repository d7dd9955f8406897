package jit

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// The dropout contract: the mask of an element depends only on (seed,
// step, stream, global element index), so launch shapes, worker counts and
// fusion plans cannot change it. The CPU emulation draws it 64 elements at
// a time from a cache, with a 4-lane variant for vectorised loops and a
// lane-by-lane fallback; the GPU draws one element per thread. These tests
// pin all of them to the Go reference (keep, in mlp_oracle_test.go).

const dropCols, dropP, dropStream, dropSeed = 101, 0.2, 3, 0xfeed_5eed_0123

// dropModel is out = dropout(x + b) with loss sum(out * w): its forward
// kernel draws the mask over rows of 101 (not a multiple of 4 or 64, so
// Philox counters and cached blocks straddle rows), and its backward
// draws it again inside the column reduction of b's gradient.
func dropModel() *ir.Model {
	b := irtest.New()
	x := b.Input("x", ir.F32, ir.S("B"), ir.D(dropCols))
	bias := b.Param("b", ir.F32, 0, 1, dropCols)
	w := b.Param("w", ir.F32, 0, 1, dropCols)
	d := b.Op("dropout", ir.Attrs{F: dropP, I: dropStream}, b.Binary("add", x, bias))
	return b.Model("droptest", b.Op("sum", ir.Attrs{}, b.Binary("mul", d, w)), d, ir.Optimizer{Kind: "sgd", LR: 1})
}

// dropRun is what one session drew: the forward mask of a predict call
// (dropout of ones: the scale or 0) and b after one SGD step with w = 1,
// which is -scale times each column's count of kept elements.
type dropRun struct{ out, bias []float64 }

func runDropout(t *testing.T, threads int, fuse bool, rows int) dropRun {
	t.Helper()
	dev, err := cpu.New(cpu.Options{Threads: threads})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	prog, err := compiler.Compile(dropModel(), compiler.Options{Fuse: fuse})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Session(dev, prog, runtime.SessionOptions{MaxBatch: rows, Seed: dropSeed})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetTrain(true)
	ones := make([]float32, rows*dropCols)
	for i := range ones {
		ones[i] = 1
	}
	zeros, onesC := make([]float64, dropCols), make([]float64, dropCols)
	for i := range onesC {
		onesC[i] = 1
	}
	writeParams(t, s, map[string][]float64{"b": zeros, "w": onesC})
	if err := s.WriteInput("x", ones, rows); err != nil {
		t.Fatal(err)
	}
	if err := s.Run("predict", rows); err != nil {
		t.Fatal(err)
	}
	var r dropRun
	r.out = readNamed(t, s, "output", "output")[:rows*dropCols]
	if err := s.Run("step", rows); err != nil {
		t.Fatal(err)
	}
	r.bias = readNamed(t, s, "param", "b")
	return r
}

// TestDropoutMaskIndependentOfLaunch draws the same dropout op under two
// fusion plans, one and two CPU workers (which splits the loops at other
// places, so vectors start at other offsets), and 64 and 37 rows (other
// grids): every forward mask agrees bit for bit on the rows they share, the
// backward (column-reduction) draw gives the bias gradient the forward mask
// implies, and the kept fraction is within binomial bounds.
func TestDropoutMaskIndependentOfLaunch(t *testing.T) {
	scale := float64(float32(1 / (1 - dropP)))
	ref := runDropout(t, 1, true, 64)
	n := len(ref.out)
	kept := 0
	for _, v := range ref.out {
		if v != 0 {
			kept++
		}
		if v != 0 && v != scale {
			t.Fatalf("dropout(ones) gave %v, want 0 or %v", v, scale)
		}
	}
	// Six standard deviations of Binomial(n, 1-p).
	if mean, sd := float64(n)*(1-dropP), math.Sqrt(float64(n)*dropP*(1-dropP)); math.Abs(float64(kept)-mean) > 6*sd {
		t.Errorf("kept %d of %d elements, want %.0f ± %.0f", kept, n, mean, 6*sd)
	}
	for _, c := range []struct {
		threads int
		fuse    bool
		rows    int
	}{{2, true, 64}, {1, false, 64}, {2, false, 64}, {1, true, 37}, {2, true, 37}, {2, false, 37}} {
		what := fmt.Sprintf("threads %d fuse %v rows %d", c.threads, c.fuse, c.rows)
		got := runDropout(t, c.threads, c.fuse, c.rows)
		for i, v := range got.out {
			if v != ref.out[i] {
				t.Fatalf("%s: element %d (row %d, col %d) = %v, want %v as with 1 worker, fused, 64 rows",
					what, i, i/dropCols, i%dropCols, v, ref.out[i])
			}
		}
		if c.rows != 64 {
			continue
		}
		for col := 0; col < dropCols; col++ {
			if got.bias[col] != ref.bias[col] {
				t.Fatalf("%s: b[%d] after the step = %v, want %v as with 1 worker, fused", what, col, got.bias[col], ref.bias[col])
			}
		}
	}
	// The backward draw (in the column reduction of b's gradient) against
	// the Go reference at the step run's key. The step run is the
	// session's second call; dropout is keyed by the call counter (2)
	// today, and by the optimizer step (1) once keyed that way: accept
	// either, every column exactly.
	for _, step := range []uint64{2, 1} {
		bad := -1
		for col := 0; col < dropCols && bad < 0; col++ {
			count := 0
			for r := 0; r < 64; r++ {
				if keep(dropSeed, step, dropStream, uint64(r*dropCols+col), dropP) {
					count++
				}
			}
			if ref.bias[col] != -scale*float64(count) {
				bad = col
			}
		}
		if bad < 0 {
			return
		}
		t.Logf("step %d: b[%d] after the step = %v, not -%v × the kept count of its column", step, bad, ref.bias[bad], scale)
	}
	t.Errorf("the backward draw matches the Go reference at neither step key")
}

// TestDropoutGPUFormMatchesGo compiles preamble.cuh's GPU ngen_dropout on
// the host (a shim stands in for the CUDA built-ins it uses) and compares
// it with the Go reference at indices that cross 32-bit words and Philox
// counters, and with a step whose high word is set. No GPU is needed, and
// the CPU backend never runs this form.
func TestDropoutGPUFormMatchesGo(t *testing.T) {
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++")
	}
	pre, err := os.ReadFile(filepath.Join("..", "preamble.cuh"))
	if err != nil {
		t.Fatal(err)
	}
	type draw struct {
		seed, step uint64
		stream     uint32
		idx        uint64
	}
	var draws []draw
	for _, base := range []uint64{0, 61, 1<<32 - 5, 3<<32 + 1} {
		for d := uint64(0); d < 9; d++ {
			draws = append(draws, draw{dropSeed, 7, 2, base + d}, draw{^uint64(0), 5<<32 | 9, 0xffffffff, base + d})
		}
	}
	var src strings.Builder
	src.WriteString("#include <cmath>\n#include <cstdio>\n#define __device__\n#define __forceinline__ inline\n")
	src.WriteString("static unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }\n")
	src.Write(pre)
	src.WriteString("\nint main() {\n")
	for _, d := range draws {
		fmt.Fprintf(&src, "  printf(\"%%g\\n\", ngen_dropout(%dull, %dull, %du, %dll, %.9gf, 1.25f));\n", d.seed, d.step, d.stream, d.idx, float32(1-dropP))
	}
	src.WriteString("}\n")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gpu_form.cc"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "gpu_form")
	if out, err := exec.Command(cxx, "-std=c++17", "-O2", "-o", bin, filepath.Join(dir, "gpu_form.cc")).CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != len(draws) {
		t.Fatalf("got %d results, want %d", len(lines), len(draws))
	}
	for i, d := range draws {
		want := "0"
		if keep(d.seed, d.step, d.stream, d.idx, dropP) {
			want = "1.25"
		}
		if lines[i] != want {
			t.Errorf("GPU ngen_dropout(seed %#x, step %#x, stream %d, idx %#x) = %s, want %s", d.seed, d.step, d.stream, d.idx, lines[i], want)
		}
	}
}
