package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// saveCheckpoint writes the checkpoint beside the destination and renames
// it over it, so a failure leaves any earlier checkpoint whole.
func saveCheckpoint(m interface{ Save(io.Writer) error }, path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".ckpt-*")
	if err != nil {
		return err
	}
	err = m.Save(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("-save %s: %w", path, err)
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
