package cpu_test

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// Every vector path a generated package's host glue can take, run on
// whole models. A package's launchers are compiled for baseline x86-64
// with an AVX2 copy picked at load time (NGEN_EMU_LAUNCHER), and the
// recurrences' host forms add a copy compiled for AVX2 and FMA picked at
// run time (::ngen_emu::scan_fma()). So the kernels run in one of four
// builds:
//
//	launchers   recurrences' form   where
//	AVX2 copy   AVX2+FMA copy       a host with AVX2 and FMA (this one, and most)
//	SSE2        AVX2+FMA copy       the same, built with NGEN_EMU_NO_CLONES (codegen/jit's modules)
//	AVX2 copy   without FMA         a host with AVX2 and no FMA
//	SSE2        without FMA         a host without AVX2
//
// The test compiles each package's own host/host.cc at run time
// (cpu.CompileModule, against generated/ngen_emu.h as cgo compiles it)
// with and without NGEN_EMU_NO_CLONES, and with a header whose scan_fma
// says no for the forms without FMA, and runs them beside the package as
// linked.
//
// Planted bugs this file catches (each planted by hand, seen to fail,
// reverted):
//   - FMA in the launchers' vector copy (target_clones("fma", "default")
//     in generated/ngen_emu.h: g++ contracts a*b+c): "AVX2 launchers
//     against SSE2 launchers" fails on all four models (a clone for
//     "arch=haswell" instead is never chosen on an AMD host, and passes);
//   - the no-FMA header left as it was: "agree bit for bit: one of them
//     did not run" on charlm;
//   - fast_sigmoidf 1e-5 too large in the no-FMA forms only: fmaBound
//     fails on charlm's gradients.

// dispatchModels are the packages whose every path runs: the seed MLP
// (dropout, Adam), a ConvNet with batch norm (convolutions as GEMMs,
// per-channel reductions, running statistics), the character LSTM (the
// recurrences' host forms) and the gpt (attention's host form, LayerNorm,
// GELU); batch small, so that the four builds' steps take seconds.
var dispatchModels = []struct {
	name  string
	batch int
}{{"mlp", 8}, {"convnet_bn", 4}, {"charlm", 4}, {"gpt", 2}}

// hostBuild compiles package g's host glue (generated/<g>/host/host.cc)
// at run time, with NGEN_EMU_NO_CLONES when sse2Only, and with the
// recurrences' FMA copy never chosen when noFMA.
func hostBuild(t *testing.T, g *runtime.Generated, sse2Only, noFMA bool) *runtime.Generated {
	t.Helper()
	gen := filepath.Join("..", "..", "generated")
	src, err := os.ReadFile(filepath.Join(gen, g.Name, "host", "host.cc"))
	if err != nil {
		t.Fatal(err)
	}
	header, err := os.ReadFile(filepath.Join(gen, "ngen_emu.h"))
	if err != nil {
		t.Fatal(err)
	}
	// The package's entry is named for it, so that packages linked into
	// one binary do not collide; CompileModule looks for ngen_cpu_entry.
	entries := regexp.MustCompile(`extern "C" int (ngen_cpu_entry_\w+)\(`).FindAllStringSubmatch(string(src), -1)
	if len(entries) != 1 {
		t.Fatalf("%s: host.cc defines %d entries, want 1", g.Name, len(entries))
	}
	text := strings.Replace(string(src), entries[0][1], "ngen_cpu_entry", 1)
	name := g.Name
	if sse2Only {
		text = "#define NGEN_EMU_NO_CLONES 1\n" + text
		name += "_sse2"
	}
	h := string(header)
	if noFMA {
		const fma = `static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");`
		if strings.Count(h, fma) != 1 {
			t.Fatalf("generated/ngen_emu.h's scan_fma no longer reads %q: update hostBuild", fma)
		}
		h = strings.Replace(h, fma, "static const bool ok = false;", 1)
		name += "_nofma"
	}
	m, err := cpu.CompileModule(name, map[string]string{"ngen_emu.h": h, "host.cc": text}, "host.cc", g.Plan.Kernels)
	if err != nil {
		t.Fatal(err)
	}
	m.Source = g.Module().Source
	b := *g
	b.Name = name
	b.Module = func() *runtime.Module { return m }
	return &b
}

// stepResult is what two training steps from one seed and batch leave:
// the losses, the first step's gradients, and the checkpoint (parameters,
// Adam's moments, batch norm's running statistics) after the second.
type stepResult struct {
	loss  [2]float64
	grads map[string][]float64
	names []string
	ckpt  []byte
}

func twoSteps(t *testing.T, dev runtime.Device, g *runtime.Generated, batch int) stepResult {
	t.Helper()
	in, err := g.SampleInputs("step", batch, 1)
	if err != nil {
		t.Fatal(err)
	}
	m, err := g.New(dev, runtime.SessionOptions{MaxBatch: batch, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r := stepResult{grads: map[string][]float64{}, names: m.Params()}
	for s := range r.loss {
		if r.loss[s], err = m.Step(in); err != nil {
			t.Fatalf("%s step %d: %v", g.Name, s+1, err)
		}
		if s > 0 {
			continue
		}
		for _, n := range r.names {
			if r.grads[n], err = m.Grad(n); err != nil {
				t.Fatal(err)
			}
		}
	}
	var b bytes.Buffer
	if err := m.Save(&b); err != nil {
		t.Fatal(err)
	}
	r.ckpt = b.Bytes()
	return r
}

// sameBits fails unless a and b are equal bit for bit.
func sameBits(t *testing.T, what string, a, b stepResult) {
	t.Helper()
	for s := range a.loss {
		if math.Float64bits(a.loss[s]) != math.Float64bits(b.loss[s]) {
			t.Fatalf("%s: step %d's loss %v against %v", what, s+1, a.loss[s], b.loss[s])
		}
	}
	for _, n := range a.names {
		for i, v := range a.grads[n] {
			if math.Float64bits(v) != math.Float64bits(b.grads[n][i]) {
				t.Fatalf("%s: grad %s[%d] = %v against %v", what, n, i, v, b.grads[n][i])
			}
		}
	}
	if !bytes.Equal(a.ckpt, b.ckpt) {
		t.Fatalf("%s: the checkpoints after two steps differ (%d and %d bytes)", what, len(a.ckpt), len(b.ckpt))
	}
}

// TestDispatchPathsModels runs two training steps of each of
// dispatchModels through every build a host may run (the table above)
// and requires:
//   - the AVX2 launchers and the SSE2 ones to agree bit for bit, with the
//     recurrences' FMA copy (the package as linked, against
//     NGEN_EMU_NO_CLONES) and without it (both rebuilt): the AVX2 copy
//     has no FMA, so its arithmetic is the SSE2 copy's;
//   - the recurrences' FMA copy to stay within FMA's rounding of the form
//     without it, and to differ from it somewhere (else one path ran
//     twice). Models without a recurrence have no such copy, and run
//     the first two builds only.
func TestDispatchPathsModels(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles four models' host glue again, the recurrent one three ways (-short)")
	}
	// The package as linked was compiled by cgo at -O3; its rebuilds here
	// must be too, or g++'s -O1 (the JIT's default) would compile a*b+c
	// differently in the FMA-targeted copies.
	t.Setenv("NGEN_JIT_OPT", "-O3")
	info, _ := os.ReadFile("/proc/cpuinfo")
	hasAVX2 := strings.Contains(string(info), " avx2")
	hasFMA := strings.Contains(string(info), " fma")
	// One thread: kernels that combine per-thread partials (the loss's
	// atomic sum) would otherwise vary between runs in their last bits.
	dev := newDev(t, cpu.Options{Threads: 1})
	for _, c := range dispatchModels {
		t.Run(c.name, func(t *testing.T) {
			g, err := runtime.Registered("github.com/ngen-ml/ngen/generated/" + c.name)
			if err != nil {
				t.Fatal(err)
			}
			src, err := os.ReadFile(filepath.Join("..", "..", "generated", c.name, "host", "host.cc"))
			if err != nil {
				t.Fatal(err)
			}
			recurrent := strings.Contains(string(src), "::ngen_emu::scan_fma()")
			linked := twoSteps(t, dev, g, c.batch)
			sse2 := twoSteps(t, dev, hostBuild(t, g, true, false), c.batch)
			if hasAVX2 {
				// The package as linked has AVX2 copies unless its
				// cgo flags took them away (NGEN_EMU_NO_CLONES in
				// CGO_CXXFLAGS): the run-time build has them for sure.
				avx2 := twoSteps(t, dev, hostBuild(t, g, false, false), c.batch)
				sameBits(t, "AVX2 launchers against SSE2 launchers", avx2, sse2)
			} else {
				t.Log("no AVX2 on this host: every build runs its SSE2 launchers; the AVX2 copies are not run")
			}
			sameBits(t, "the package as linked against SSE2 launchers", linked, sse2)
			if !recurrent {
				return // no form chosen by scan_fma: the first two builds are every path
			}
			noFMA := twoSteps(t, dev, hostBuild(t, g, true, true), c.batch)
			if hasAVX2 {
				avx2NoFMA := twoSteps(t, dev, hostBuild(t, g, false, true), c.batch)
				sameBits(t, "AVX2 launchers without FMA against SSE2 launchers without FMA", avx2NoFMA, noFMA)
			}
			if !hasAVX2 || !hasFMA {
				t.Log("no AVX2 and FMA on this host: the recurrences' FMA copy is never chosen, so it is not run")
				sameBits(t, "without FMA on the host: the no-FMA build against the package as linked", noFMA, linked)
				return
			}
			fmaBound(t, linked, noFMA)
		})
	}
}

// fmaBound compares the recurrences' FMA copy (a) with the same form
// without FMA (b). FMA rounds each a*b+c once where the plain form rounds
// twice: about an ulp of f32 per cell operation, carried through the time
// steps and the backward pass, so the losses agree to rtol 1e-6 and each
// gradient to rtol 1e-5 plus 1e-6 of the largest (charlm at batch 4: up
// to 4e-8 of the largest, identical losses). The two must differ
// somewhere: if they do not, one of them did not run.
func fmaBound(t *testing.T, a, b stepResult) {
	t.Helper()
	differ := false
	for s := range a.loss {
		if d := math.Abs(a.loss[s] - b.loss[s]); d > 1e-6*math.Abs(b.loss[s]) || math.IsNaN(a.loss[s]) {
			t.Fatalf("step %d: loss %v with the recurrences' FMA copy, %v without", s+1, a.loss[s], b.loss[s])
		}
		differ = differ || a.loss[s] != b.loss[s]
	}
	gmax, worst, at := 0.0, 0.0, ""
	for _, n := range b.names {
		for _, v := range b.grads[n] {
			gmax = math.Max(gmax, math.Abs(v))
		}
	}
	for _, n := range b.names {
		for i, v := range b.grads[n] {
			d := math.Abs(a.grads[n][i] - v)
			if d > 1e-5*math.Abs(v)+1e-6*gmax || math.IsNaN(a.grads[n][i]) {
				t.Fatalf("grad %s[%d] = %v with the recurrences' FMA copy, %v without", n, i, a.grads[n][i], v)
			}
			if d > worst {
				worst, at = d, fmt.Sprintf("%s[%d]", n, i)
			}
			differ = differ || d != 0
		}
	}
	t.Logf("FMA copy against the form without FMA: losses %v and %v, gradients differ by up to %.3g (at %s; largest gradient %.3g)",
		a.loss, b.loss, worst, at, gmax)
	if !differ {
		t.Fatal("the recurrences' FMA copy and the form without it agree bit for bit: one of them did not run")
	}
}
