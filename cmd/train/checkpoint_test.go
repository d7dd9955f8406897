package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ngen-ml/ngen/runtime/cpu"
)

// TestSaveLoadFlags: -save is checked before training (a missing
// directory, a directory as target), writes through a temporary file
// (nothing else is left beside it) and -load resumes with the step count.
func TestSaveLoadFlags(t *testing.T) {
	dir := t.TempDir()
	if err := checkWritable(filepath.Join(dir, "no", "such", "dir", "m.ckpt")); err == nil {
		t.Error("-save into a missing directory accepted")
	}
	if err := checkWritable(dir); err == nil {
		t.Error("-save onto a directory accepted")
	}
	target := filepath.Join(dir, "m.safetensors")
	if err := checkWritable(target); err != nil {
		t.Fatal(err)
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m, err := models["mlp"](dev, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x, y := make([]float32, 4*784), []int32{1, 2, 3, 4}
	for i := range x {
		x[i] = rand.Float32()
	}
	for i := 0; i < 3; i++ {
		if _, err := m.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	if err := saveCheckpoint(m, target); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left beside the checkpoint: %v", ents)
	}
	r, err := models["mlp"](dev, 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := loadCheckpoint(r, target); err != nil {
		t.Fatal(err)
	}
	if r.Session().Steps() != 3 {
		t.Fatalf("resumed at step %d, want 3", r.Session().Steps())
	}
	if err := loadCheckpoint(r, filepath.Join(dir, "missing")); err == nil {
		t.Fatal("-load of a missing file accepted")
	}
}
