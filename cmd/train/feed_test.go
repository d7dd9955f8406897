package main

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/data"
)

// TestPrefetchChangesNothing trains the MLP for two epochs from the loader
// and from a prefetcher over it: losses and parameters agree bit for bit.
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
	run := func(pre bool) ([]float64, map[string][]float32) {
		m, err := mlp.New(dev, mlp.Options{Batch: 32, Seed: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		var src batches = must(data.NewLoader(ds, 32, true, 9))
		if pre {
			src = data.NewPrefetcher(must(data.NewLoader(ds, 32, true, 9)))
		}
		var sums []float64
		for range 2 {
			sum, n, _, err := trainEpoch(m, src, nil)
			if err != nil || n != 7 {
				t.Fatalf("%d steps: %v", n, err)
			}
			sums = append(sums, sum)
		}
		ps := map[string][]float32{}
		for _, name := range m.Params() {
			ps[name], _ = m.Param(name)
		}
		return sums, ps
	}
	l1, p1 := run(false)
	l2, p2 := run(true)
	if !slices.Equal(l1, l2) {
		t.Fatalf("losses %v and %v", l1, l2)
	}
	for name, v := range p1 {
		if !slices.Equal(v, p2[name]) {
			t.Fatalf("%s differs", name)
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
