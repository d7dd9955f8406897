package main

import (
	"testing"

	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestHugeBatchFlag: -batch with a huge value is an error, not a panic,
// both when parsed and when a model is built at a size that passes the
// parser but cannot be allocated.
func TestHugeBatchFlag(t *testing.T) {
	for _, s := range []string{"4611686018427387905", "99999999999999999999", "2147483648", "-1"} {
		if _, err := parseBatch(s); err == nil {
			t.Errorf("-batch %s accepted", s)
		}
	}
	dev, err := cpu.New(cpu.Options{MemoryLimit: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	n, err := parseBatch("2147483647")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := models["mlp"](dev, n, 1); err == nil {
		m.Close()
		t.Fatal("a batch of 2^31-1 built")
	}
}

// TestCountFlags: the second adversarial pass found -accumulate 0,
// -epochs -3 and stray words after the flags accepted without a word.
func TestCountFlags(t *testing.T) {
	for _, c := range []struct {
		epochs, accum int
		args          []string
	}{{1, 0, nil}, {1, -1, nil}, {-3, 1, nil}, {1, 1, []string{"10"}}} {
		if err := checkCounts(c.epochs, c.accum, c.args); err == nil {
			t.Errorf("-epochs %d -accumulate %d %v accepted", c.epochs, c.accum, c.args)
		}
	}
	if err := checkCounts(0, 1, nil); err != nil {
		t.Errorf("-epochs 0 (load and save only): %v", err)
	}
}
