// Package outfile checks and writes the files the tools produce (pictures,
// traces, logs): a bad name or an unwritable place is an error before any
// work starts, and a file is written beside its destination and renamed
// over it, so a failure never leaves half a file.
package outfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Check fails unless path has one of exts (".png", ".svg"; compared
// without case) and a new file can be written in its directory; an
// existing path must be a regular file. flag names the option in the
// message.
func Check(flag, path string, exts ...string) error {
	if path == "" {
		return fmt.Errorf("%s: empty file name", flag)
	}
	ext := strings.ToLower(filepath.Ext(path))
	if len(exts) > 0 && !slices.Contains(exts, ext) {
		return fmt.Errorf("%s %s: unknown extension %q: want %s", flag, path, filepath.Ext(path), strings.Join(exts, ", "))
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s %s: not a regular file", flag, path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".ngen-check-*")
	if err != nil {
		return fmt.Errorf("%s %s: cannot write there: %w", flag, path, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// Write writes data to path through a temporary file in the same
// directory, synced and renamed over path.
func Write(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".ngen-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	err = errors.Join(werr, serr, cerr)
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
