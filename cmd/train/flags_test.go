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
