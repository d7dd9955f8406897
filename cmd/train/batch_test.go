package main

import (
	"testing"

	"github.com/ngen-ml/ngen/runtime"
	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestAutoBatch: -batch auto picks the largest batch that fits the
// device's memory: the model builds at it and not one row larger.
func TestAutoBatch(t *testing.T) {
	if _, err := parseBatch("0"); err == nil {
		t.Error("-batch 0 accepted")
	}
	if n, err := parseBatch("auto"); err != nil || n != 0 {
		t.Errorf("-batch auto: %d, %v", n, err)
	}
	dev, err := cpu.New(cpu.Options{MemoryLimit: 30 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	mk := models["mlp"]
	b, err := autoBatch(dev, mk, 0, 1, 60000)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mk(dev, b, 1)
	if err != nil {
		t.Fatalf("batch %d: %v", b, err)
	}
	m.Close()
	if _, err := mk(dev, b+1, 1); !runtime.IsOutOfMemory(err) {
		t.Fatalf("batch %d: %v, want out of memory", b+1, err)
	}
	if c, err := autoBatch(dev, mk, 0, 1, 100); err != nil || c != 100 {
		t.Fatalf("capped at the training set: %d, %v", c, err)
	}
}
