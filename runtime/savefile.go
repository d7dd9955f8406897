package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// SaveFile replaces the file at path with what write writes, so that
// whenever the process dies (SIGKILL, power loss after the call returned)
// path holds either its previous contents or the new ones, whole, never a
// part: write goes to a temporary file in path's directory, which is
// flushed to stable storage (fsync), renamed over path (atomic on POSIX
// file systems), and the directory is flushed so the rename itself is
// durable. An existing file keeps its permissions; a new one gets 0644.
//
// A process killed during SaveFile may leave its temporary file, named
// .<base of path>.tmp-<random>, beside path; SaveFile removes it on every
// error it returns. Two concurrent SaveFile calls to one path leave one
// of the two files whole.
func SaveFile(path string, write func(io.Writer) error) (err error) {
	if write == nil {
		return fmt.Errorf("SaveFile %s: nil write function", path)
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	mode := os.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("SaveFile %s: not a regular file", path)
		}
		mode = fi.Mode().Perm()
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("SaveFile %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("SaveFile %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := write(f); err != nil {
		return fmt.Errorf("SaveFile %s: %w", path, err)
	}
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("SaveFile %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("SaveFile %s: flushing %s: %w", path, tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("SaveFile %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("SaveFile %s: %w", path, err)
	}
	// The rename is in the directory: flush it too, or a power loss could
	// bring back the old name. Some file systems cannot sync a directory;
	// the rename has happened, so that is not an error.
	if d, derr := os.Open(dir); derr == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// SaveFile writes the session's checkpoint (Save) to path through
// runtime.SaveFile: a crash at any point leaves the previous file or the
// new one, whole.
func (s *Session) SaveFile(path string) error {
	if err := s.alive("SaveFile"); err != nil {
		return err
	}
	return SaveFile(path, s.Save)
}
