package fuzzgen

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

var (
	flagModels  = flag.Int("models", 0, "random models TestFuzz checks (0: the CI set)")
	flagSeed    = flag.Uint64("seed", 1, "first generator seed of TestFuzz (with -models)")
	flagGroup   = flag.Int("group", 0, "models compiled into one program (0: the CI set's)")
	flagShrink  = flag.Int("shrink", 40, "candidates the shrinker may try per failure (0: no shrinking)")
	flagRegress = flag.String("regress", "", "directory to write a regression test file into for each shrunk failure")
	flagRecord  = flag.String("record", "", "file to append one JSON line per group to (seeds, failures, seconds)")
)

// The CI set: ciModels models from seed ciSeed, ciGroup to a program.
// A group is three g++ compilations (fused, unfused, GPU forms) and one
// PyTorch run. On the 2-core development VM with an empty ngen module
// cache (load 4.5 to 9 from other jobs) the groups of seeds 1..24 took
// 121, 84, 47 and 76 s and the whole package 6.3 minutes, over the
// 5-minute budget; two groups (seeds 1..12) and the regression models
// fit it (docs/FUZZ.md).
const (
	ciSeed   = 1
	ciModels = 12
	ciGroup  = 6
)

// TestFuzz draws random models and checks them with Check, several to a
// compiled program: fused against unfused, GPU forms against CPU forms,
// against PyTorch, planned against allocated memory. A failing model is
// shrunk (-shrink) and its DSL source printed; -regress writes it as a
// regression test. go test ./compiler/fuzzgen -run Fuzz -args -models N
// -seed S runs N models from seed S.
func TestFuzz(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles and runs random models (-short)")
	}
	if err := oracle.Available(); err != nil {
		t.Skip(err)
	}
	models, seed, group := ciModels, uint64(ciSeed), ciGroup
	if *flagModels > 0 {
		models, seed = *flagModels, *flagSeed
	}
	if *flagGroup > 0 {
		group = *flagGroup
	}
	o := Options{}
	var err error
	if o.Dev, err = cpu.New(cpu.Options{Threads: 2}); err != nil {
		t.Fatal(err)
	}
	defer o.Dev.Close()
	if o.GPUDev, err = cpu.New(cpu.Options{Threads: 2, GPUForms: true}); err != nil {
		t.Fatal(err)
	}
	defer o.GPUDev.Close()
	if o.BaseDev, err = cpu.New(cpu.Options{Threads: 2, Baseline: true}); err != nil {
		t.Fatal(err)
	}
	defer o.BaseDev.Close()
	start := time.Now()
	checked, failed := 0, 0
	for first := seed; first < seed+uint64(models); first += uint64(group) {
		n := min(group, int(seed+uint64(models)-first))
		cfg := GroupConfig(first)
		var specs []*Spec
		for k := 0; k < n; k++ {
			specs = append(specs, Generate(first+uint64(k), cfg))
		}
		t0 := time.Now()
		fails, st, err := Check(specs, o)
		if err != nil {
			t.Fatal(err)
		}
		checked += n
		bad := map[int]bool{}
		for _, f := range fails {
			bad[f.Spec] = true
		}
		failed += len(bad)
		t.Logf("seeds %d..%d (%s, %s, batch %d): %d failures; compile %.1fs, run %.1fs, torch %.1fs, total %.1fs",
			first, first+uint64(n)-1, cfg.DType, cfg.Opt.Kind, cfg.BatchSize, len(fails),
			st.Compile.Seconds(), st.Run.Seconds(), st.Torch.Seconds(), time.Since(t0).Seconds())
		if st.Diverged > 0 {
			t.Logf("seeds %d..%d: the loss left the floating-point range at step %d; compared over the %d steps before", first, first+uint64(n)-1, st.Diverged, st.Diverged-1)
		}
		record(t, first, n, fails, st.Diverged, time.Since(t0))
		for k := range bad {
			t.Errorf("%s", report(t, specs, k, fails, o))
		}
	}
	t.Logf("%d models checked in %.0fs, %d failed", checked, time.Since(start).Seconds(), failed)
}

// report describes the failures of spec k (all specs when k is -1),
// shrinks the spec and returns its DSL source.
func report(t *testing.T, specs []*Spec, k int, fails []Failure, o Options) string {
	var b strings.Builder
	var mine []Failure
	for _, f := range fails {
		if f.Spec == k {
			mine = append(mine, f)
			fmt.Fprintf(&b, "%s\n", f)
		}
	}
	if k < 0 {
		fmt.Fprintf(&b, "(the failure is not put on one model: check each alone with -models 1 -group 1 -seed S)\n")
		return b.String()
	}
	s := specs[k]
	check := mine[0].Check
	// Shrinking runs only the check that failed.
	o.Skip = map[string]bool{"fuse": true, "gpuforms": true, "torch": true, "memory": true}
	delete(o.Skip, map[string]string{"fused/unfused": "fuse", "gpu forms": "gpuforms", "torch": "torch", "memory": "memory"}[check])
	fails1 := func(c *Spec) bool {
		c.Batch = s.Batch
		f, _, err := Check([]*Spec{c}, o)
		if err != nil {
			return false
		}
		for _, x := range f {
			if x.Check == check {
				return true
			}
		}
		return false
	}
	alone := s.Clone()
	alone.Batch = s.Batch
	if *flagShrink == 0 || !fails1(alone) {
		if *flagShrink > 0 {
			fmt.Fprintf(&b, "(%s fails only in its group of %d)\n", s.Name, len(specs))
		}
		fmt.Fprintf(&b, "%s", s.Source("Model"))
		return b.String()
	}
	small := Shrink(alone, func(c *Spec) bool {
		f := fails1(c)
		t.Logf("shrink %s: %d nodes, batch %d: fails %v", s.Name, len(c.Nodes), c.Batch, f)
		return f
	}, *flagShrink)
	final, _, _ := Check([]*Spec{small}, o)
	fmt.Fprintf(&b, "shrunk to %d nodes (from %d):\n", len(small.Nodes), len(s.Nodes))
	for _, f := range final {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	fmt.Fprintf(&b, "%s", small.Source("Model"))
	if *flagRegress != "" {
		path := filepath.Join(*flagRegress, "regress_"+small.Name+"_test.go")
		if err := os.WriteFile(path, []byte(RegressionTest(small, final)), 0o644); err != nil {
			t.Error(err)
		} else {
			fmt.Fprintf(&b, "wrote %s\n", path)
		}
	}
	return b.String()
}

// record appends one JSON line for a group to -record's file.
func record(t *testing.T, first uint64, n int, fails []Failure, diverged int, d time.Duration) {
	if *flagRecord == "" {
		return
	}
	f, err := os.OpenFile(*flagRecord, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rec := map[string]any{"first": first, "models": n, "failures": fails, "seconds": d.Seconds(), "date": time.Now().UTC().Format(time.RFC3339)}
	if diverged > 0 {
		rec["diverged"] = diverged // the steps compared are the ones before
	}
	line, _ := json.Marshal(rec)
	f.Write(append(line, '\n'))
}
