package codegen

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WriteDir replaces the generated files in dir with files; it is the only
// step of code generation that touches the file system.
//
// A file whose content is already in place is left alone (a regenerated,
// unchanged model touches nothing). Every other file is first written and
// synced under a temporary name in dir (same file system, so renames are
// atomic). Then each existing file is
// moved aside and its replacement renamed into place; if any rename fails,
// the moved-aside files are put back, so an error leaves dir as it was
// (and removes dir again if WriteDir created it). Files in dir that carry
// ngen's generated header but are no longer produced are removed last;
// other files are never touched.
func WriteDir(dir string, files map[string][]byte) (err error) {
	names := FileNames(files)
	for _, name := range names {
		if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") || strings.ContainsAny(name, `/\`) {
			return fmt.Errorf("writing %s: generated file name %q is not a plain file name", dir, name)
		}
	}
	created := false
	if _, serr := os.Stat(dir); errors.Is(serr, os.ErrNotExist) {
		created = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var temps, backups []string // backups[i] is "" when names[i] is new
	unchanged := make([]bool, len(names))
	defer func() {
		for _, t := range temps {
			if t != "" {
				os.Remove(t)
			}
		}
		if err != nil && created {
			os.Remove(dir) // only succeeds if empty, as it was
		}
	}()
	for i, name := range names {
		if fi, serr := os.Lstat(filepath.Join(dir, name)); serr == nil && !fi.Mode().IsRegular() {
			return fmt.Errorf("writing %s: %s exists and is not a regular file", dir, name)
		}
		if old, rerr := os.ReadFile(filepath.Join(dir, name)); rerr == nil && bytes.Equal(old, files[name]) {
			unchanged[i] = true
			temps = append(temps, "")
			continue
		}
		t, werr := writeTemp(dir, name, files[name])
		if werr != nil {
			return fmt.Errorf("writing %s: %w", filepath.Join(dir, name), werr)
		}
		temps = append(temps, t)
	}
	// Move old files aside and new ones in; undo everything on failure.
	rollback := func(done int) {
		for i := done - 1; i >= 0; i-- {
			target := filepath.Join(dir, names[i])
			if unchanged[i] {
				continue
			}
			if backups[i] != "" {
				os.Rename(backups[i], target)
			} else {
				os.Remove(target)
			}
		}
	}
	for i, name := range names {
		target := filepath.Join(dir, name)
		backups = append(backups, "")
		if unchanged[i] {
			continue
		}
		if _, serr := os.Lstat(target); serr == nil {
			b := temps[i] + ".old"
			if rerr := rename(target, b); rerr != nil {
				rollback(i)
				return rerr
			}
			backups[i] = b
		}
		if rerr := rename(temps[i], target); rerr != nil {
			if backups[i] != "" {
				os.Rename(backups[i], target)
			}
			rollback(i)
			return rerr
		}
		temps[i] = ""
	}
	for _, b := range backups {
		if b != "" {
			os.Remove(b)
		}
	}
	syncDir(dir)
	return removeStale(dir, files)
}

// rename is os.Rename; tests make it fail part way.
var rename = os.Rename

func writeTemp(dir, name string, data []byte) (string, error) {
	f, err := os.CreateTemp(dir, ".ngen-"+name+"-*")
	if err != nil {
		return "", err
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// syncDir makes the renames durable where the platform allows it.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// removeStale deletes regular files in dir that an earlier run generated
// and this one did not.
func removeStale(dir string, files map[string][]byte) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if _, ok := files[e.Name()]; ok || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		// A fatbin is binary and cannot carry the header; ngen writes it
		// only beside its own .cu.
		if generatedByNgen(path) || (strings.HasSuffix(e.Name(), ".fatbin") && hasGeneratedCU(dir)) {
			if err := os.Remove(path); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// hasGeneratedCU reports whether dir holds a .cu that ngen generated.
func hasGeneratedCU(dir string) bool {
	cus, _ := filepath.Glob(filepath.Join(dir, "*.cu"))
	for _, c := range cus {
		if generatedByNgen(c) {
			return true
		}
	}
	return false
}

// generatedByNgen reports whether line 1 of the file is ngen's header.
func generatedByNgen(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadBytes('\n')
	line = bytes.TrimRight(line, "\r\n")
	return bytes.HasPrefix(line, []byte("// Code generated by ngen ")) && bytes.HasSuffix(line, []byte(". DO NOT EDIT."))
}
