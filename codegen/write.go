package codegen

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
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
// other files are never touched. A name may name a file one directory
// down ("host/host.cc"), which is treated alike.
func WriteDir(dir string, files map[string][]byte) (err error) {
	names := FileNames(files)
	subs := map[string]bool{".": true}
	for _, name := range names {
		parts := strings.Split(name, "/")
		if len(parts) > 2 {
			return fmt.Errorf("writing %s: generated file name %q is more than one directory deep", dir, name)
		}
		for _, part := range parts {
			if part == "" || part != filepath.Base(part) || strings.HasPrefix(part, ".") || strings.ContainsAny(part, `\`) {
				return fmt.Errorf("writing %s: generated file name %q is not a plain file name", dir, name)
			}
		}
		subs[path.Dir(name)] = true
	}
	var created []string // directories this call made, to remove again on error
	for _, sub := range FileNames(toSet(subs)) {
		d := filepath.Join(dir, filepath.FromSlash(sub))
		if _, serr := os.Stat(d); errors.Is(serr, os.ErrNotExist) {
			created = append(created, d)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var temps, backups []string // backups[i] is "" when names[i] is new
	unchanged := make([]bool, len(names))
	defer func() {
		for _, t := range temps {
			if t != "" {
				os.Remove(t)
			}
		}
		if err != nil {
			for i := len(created) - 1; i >= 0; i-- {
				os.Remove(created[i]) // only succeeds if empty, as it was
			}
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
		t, werr := writeTemp(filepath.Dir(filepath.Join(dir, name)), path.Base(name), files[name])
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
	var errs []error
	for _, sub := range FileNames(toSet(subs)) {
		d := filepath.Join(dir, filepath.FromSlash(sub))
		syncDir(d)
		in := map[string][]byte{}
		for name, data := range files {
			if path.Dir(name) == sub {
				in[path.Base(name)] = data
			}
		}
		errs = append(errs, removeStale(d, in))
	}
	return errors.Join(errs...)
}

func toSet(m map[string]bool) map[string][]byte {
	out := map[string][]byte{}
	for k := range m {
		out[k] = nil
	}
	return out
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
		// A fatbin (or the PTX earlier versions wrote) cannot carry the
		// header; ngen writes it only beside its own .cu.
		nvccOut := strings.HasSuffix(e.Name(), ".fatbin") || strings.HasSuffix(e.Name(), ".fatbin.gz") || strings.HasSuffix(e.Name(), ".ptx")
		if generatedByNgen(path) || (nvccOut && hasGeneratedCU(dir)) {
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

// WriteFile writes one generated file atomically (a synced temporary file
// renamed over it), leaving it alone when its content is already in place.
func WriteFile(file string, data []byte) error {
	if old, err := os.ReadFile(file); err == nil && bytes.Equal(old, data) {
		return nil
	}
	dir := filepath.Dir(file)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if fi, err := os.Lstat(file); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("writing %s: it exists and is not a regular file", file)
	}
	t, err := writeTemp(dir, filepath.Base(file), data)
	if err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	if err := rename(t, file); err != nil {
		os.Remove(t)
		return err
	}
	syncDir(dir)
	return nil
}
