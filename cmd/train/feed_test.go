package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/data"
)

// TestPrefetchChangesNothing trains the MLP for two epochs from the loader,
// from a prefetcher over it, and from the prefetcher with pipelined steps
// (each step judged during the next call; with accumulation, judged in
// their own calls), with and without accumulation: losses, what
// trainEpoch's callback sees and the parameters agree bit for bit.
func TestPrefetchChangesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ds := &data.Dataset{N: 200, Features: 784}
	for range ds.N * ds.Features {
		ds.X = append(ds.X, rng.Float32())
	}
	for range ds.N {
		ds.Y = append(ds.Y, int32(rng.IntN(10)))
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	run := func(pre, pipelined bool, accum int) ([]float64, []string, map[string][]float32) {
		m, err := mlp.New(dev, mlp.Options{Batch: 32, Seed: 4, AccumulationSteps: accum})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		if pipelined {
			if err := m.Session().SetPipelined(true); err != nil {
				t.Fatal(err)
			}
		}
		var seen []string
		var src batches = must(data.NewLoader(ds, 32, true, 9))
		if pre {
			src = data.NewPrefetcher(must(data.NewLoader(ds, 32, true, 9)))
		}
		var sums []float64
		for range 2 {
			sum, n, _, err := trainEpoch(m, src, func(loss float32, rows int, sum float64, n int) error {
				seen = append(seen, fmt.Sprint(loss, rows, sum, n))
				return nil
			})
			if err != nil || n != 7 {
				t.Fatalf("%d steps: %v", n, err)
			}
			sums = append(sums, sum)
		}
		ps := map[string][]float32{}
		for _, name := range m.Params() {
			ps[name], _ = m.Param(name)
		}
		return sums, seen, ps
	}
	for _, accum := range []int{1, 2} {
		l1, s1, p1 := run(false, false, accum)
		for _, pipelined := range []bool{false, true} {
			l2, s2, p2 := run(true, pipelined, accum)
			if !slices.Equal(l1, l2) {
				t.Fatalf("accumulate %d, pipelined %v: losses %v and %v", accum, pipelined, l1, l2)
			}
			if !slices.Equal(s1, s2) {
				t.Fatalf("accumulate %d, pipelined %v: the callback saw %q and %q", accum, pipelined, s1, s2)
			}
			for name, v := range p1 {
				if !slices.Equal(v, p2[name]) {
					t.Fatalf("accumulate %d, pipelined %v: %s differs", accum, pipelined, name)
				}
			}
		}
	}
}

// must is v, failing the test (by panicking) on err.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
