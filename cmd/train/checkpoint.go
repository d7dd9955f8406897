package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ngen-ml/ngen/runtime"
)

// checkWritable fails early, before any training, when -save's target
// cannot be written: its directory must take a new file (the checkpoint
// is written beside it and renamed over it) and an existing target must
// be a regular file.
func checkWritable(path string) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("-save %s: not a regular file", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".ckpt-check-*")
	if err != nil {
		return fmt.Errorf("-save %s: cannot write there: %w", path, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// saveCheckpoint writes the checkpoint through runtime.SaveFile: into a
// temporary file beside the destination, flushed and renamed over it, the
// directory flushed, so that a crash or a kill at any point leaves the
// earlier checkpoint or the new one, whole.
func saveCheckpoint(m interface{ Save(io.Writer) error }, path string) error {
	if err := runtime.SaveFile(path, m.Save); err != nil {
		return fmt.Errorf("-save: %w", err)
	}
	return nil
}

// loadCheckpoint resumes from a checkpoint (-load): parameters, optimizer
// state, step count and learning rate.
func loadCheckpoint(m model, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("-load: %w", err)
	}
	defer f.Close()
	if err := m.Load(f); err != nil {
		return fmt.Errorf("-load %s: %w", path, err)
	}
	return nil
}
