package codegen

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/dsl"
	tf "github.com/ngen-ml/ngen/models/transformer"
	"github.com/ngen-ml/ngen/runtime/cpu/emu"
)

// TestGeneratedLoopsVectorise guards the CPU speed of the generated
// elementwise kernels: g++ must vectorise the grid-stride loop of every
// one of them that draws a dropout mask or computes GELU, and the masked
// exp loops of the attention's host form (ngen_emu::mask0), in both copies
// of their launchers (SSE2 and AVX2, NGEN_EMU_LAUNCHER), as the packages
// compile them. It compiles the kernels this generator emits for the seed GPT,
// not copies of them: a select on the train scalar around the dropout
// call once kept these loops scalar (the GELU loops of the gpt step took
// twice as long) while a test over hand-written copies passed.
func TestGeneratedLoopsVectorise(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		t.Skip("no g++")
	}
	for _, m := range []struct {
		name  string
		model *dsl.Model
	}{{"gpt", tf.GPT()}, {"transformer", tf.TransformerLM()}} {
		t.Run(m.name, func(t *testing.T) {
			checkLoopsVectorise(t, compileDSL(t, m.model, 16))
		})
	}
}

func checkLoopsVectorise(t *testing.T, p *compiler.Program) {
	r, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	plan := r.Plan
	glue := HostGlue(p, r, "k.cu", CUDA(p, r.CUDA), "entry")
	lines := strings.Split(glue, "\n")
	// The loop line of each chosen kernel: the first grid-stride loop after
	// its signature, in the form the CPU backend runs by default.
	want := map[int]string{}
	keep := map[int]bool{}
	seen := map[string]bool{}
	attn := 0
	for i, ki := range plan.Kernels {
		fn := ki.Name
		if ki.Host != nil {
			fn += ki.Host.Suffix
		}
		sig := -1
		for n, l := range lines {
			if (strings.HasPrefix(l, "extern \"C\" __global__") || strings.HasPrefix(l, "NGEN_HOST_FORM ")) && strings.Contains(l, " "+fn+"(") {
				sig = n
				break
			}
		}
		if sig < 0 {
			t.Fatalf("kernel %s: no signature of %s in the host glue", ki.Name, fn)
		}
		// The attention's host form: each loop that takes the exp of a
		// row of scores (the masked exp of the softmax, forward and
		// backward; ngen_emu::mask0 masks it), once per distinct loop.
		for n := sig + 1; n < len(lines) && !strings.HasPrefix(lines[n], "}"); n++ {
			if !strings.Contains(lines[n], "fast_expf(sr[kj] - ") || seen[strings.TrimSpace(lines[n])] {
				continue
			}
			attn++
			seen[strings.TrimSpace(lines[n])] = true
			loop := n
			for loop > sig && !strings.Contains(lines[loop], "for (") {
				loop--
			}
			want[loop+1] = ki.Name + " (masked exp)"
			keep[i] = true
		}
		if ki.Host != nil || !ki.GridStride || ki.Sync {
			continue
		}
		loop, vec := -1, false
		for n := sig + 1; n < len(lines) && !strings.HasPrefix(lines[n], "}"); n++ {
			if loop < 0 && strings.Contains(lines[n], "NGEN_GRID_STRIDE") {
				loop = n + 1
			}
			vec = vec || strings.Contains(lines[n], "ngen_dropout") || strings.Contains(lines[n], "ngen_gelu")
		}
		if loop < 0 || !vec {
			continue
		}
		want[loop] = ki.Name
		keep[i] = true
	}
	if len(want) == 0 {
		t.Fatal("no GELU, dropout or attention kernel found")
	}
	if attn < 2 {
		t.Fatalf("%d masked-exp loops of the attention's host form found, want its forward's and backward's", attn)
	}
	// The entry with only the chosen kernels' cases, which keeps the
	// compile to seconds (the other launchers are unused and not emitted).
	var kept []string
	for _, l := range lines {
		var k int
		if _, err := fmt.Sscanf(strings.TrimSpace(l), "case %d:", &k); err == nil && !keep[k] {
			kept = append(kept, "") // keep the line numbers
			continue
		}
		kept = append(kept, l)
	}
	dir := t.TempDir()
	for name, text := range map[string]string{"ngen_emu.h": emu.Header, "host.cc": strings.Join(kept, "\n")} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"-std=c++17", "-O3", "-fPIC", "-fopt-info-vec-optimized", "-c", "host.cc", "-o", "host.o"}
	cmd := exec.Command("g++", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("g++ %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	got := map[int]int{}
	re := regexp.MustCompile(`^host\.cc:(\d+):\d+: optimized: loop vectorized`)
	for _, l := range strings.Split(string(out), "\n") {
		if s := re.FindStringSubmatch(l); s != nil {
			var n int
			fmt.Sscan(s[1], &n)
			got[n]++
		}
	}
	for line, name := range want {
		// At least once in each copy of the launcher (g++ may also
		// vectorise an epilogue).
		if got[line] < 2 {
			t.Errorf("kernel %s: its loop (host.cc:%d) was vectorised %d times, want at least once in each of the launcher's 2 copies:\n%s", name, line, got[line], lines[line-1])
		}
	}
	t.Logf("%d GELU, dropout and attention kernel loops checked", len(want))
}
