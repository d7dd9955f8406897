// Package nvcc compiles a generated .cu ahead of time with NVIDIA's nvcc,
// when it is on PATH: compute_80 PTX with line information, and a fatbin
// built from exactly that PTX (SASS for sm_80 and sm_90, plus the PTX,
// which newer devices JIT-compile). The fatbin is committed with a stamp
// recording the hash of what it was built from. It sits beside the pure generator
// (codegen.Generate) and is called by ngen build; the GPU backend loads
// what it produces from the generated package.
//
// Results are cached by content hash (nvcc's version, the flags, the
// source) under os.UserCacheDir()/ngen/nvcc, and a generated directory
// whose stamp records the same hash is reused as is, so an unchanged model is
// never recompiled.
//
// The committed output must be byte-identical on every machine with the
// same nvcc (CI regenerates and diffs it), and -lineinfo lets the build
// machine in three ways: the .cu's absolute path in the PTX's file table;
// that path hashed into the names of the CUDA headers' internal functions in
// the debug strings; and, in the fatbin, the modification time of every
// file in that table that ptxas can find. So cicc is told a relative
// source path (which fixes the hash), the file table keeps base names
// only, and the fatbin is assembled from that PTX in a directory where
// none of those files exist. Compile checks that the build directory left
// no trace, and the test that two builds in different directories agree.
package nvcc

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/ngen-ml/ngen/codegen"
	"github.com/ngen-ml/ngen/runtime"
)

// Result is nvcc's output for one .cu.
type Result struct {
	Fatbin []byte
	// Stamp is the small text file committed beside the fatbin
	// (<name>.nvcc): ngen's header, the hash of nvcc's inputs and nvcc's
	// version, so that a machine without nvcc can tell that the fatbin is
	// up to date. (The fatbin's own PTX image is compressed.)
	Stamp []byte
	// PTX is the compute_80 PTX the fatbin was built from, headed by
	// ngen's header and the hash line; only a fresh build has it (the
	// fatbin carries it too, compressed).
	PTX    []byte
	Hash   string
	Cached bool // found in the cache or the existing directory
}

// StampFile is the name of the stamp beside name's fatbin.
func StampFile(name string) string { return name + ".nvcc" }

// Version returns nvcc's version line, or an error when nvcc is not on PATH.
func Version() (string, error) {
	path, err := exec.LookPath("nvcc")
	if err != nil {
		return "", err
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("nvcc --version: %v", err)
	}
	// The line that nvcc also writes into the PTX header.
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Cuda compilation tools, ") {
			return strings.TrimSpace(l), nil
		}
	}
	return "", fmt.Errorf("nvcc --version: no version line in %q", out)
}

// ForPackage gives the fatbin and PTX for the generated package in dir
// whose .cu is source: compiled (or cached) when nvcc is on PATH, or dir's
// up-to-date files when it is not. A nil Result with a note means there
// are none, and the GPU backend will compile with NVRTC at run time.
func ForPackage(dir, pkg, header, source string) (*Result, string, error) {
	version, err := Version()
	if err != nil {
		why := "nvcc not on PATH"
		if !errors.Is(err, exec.ErrNotFound) {
			why = err.Error()
		}
		if r := Existing(dir, pkg, "", source); r != nil {
			return r, why + ": kept the up-to-date fatbin", nil
		}
		return nil, why + ": no fatbin; the GPU backend will compile the kernels with NVRTC at start-up", nil
	}
	r, err := Compile(version, source, header, dir, pkg)
	if err != nil {
		return nil, "", err
	}
	return r, "", nil
}

// ptxArgs and fatbinArgs are the fixed targets. The sm_90 SASS comes from
// the compute_80 PTX, like the sm_80 SASS, so the committed PTX is the
// source of every image in the fatbin. --orig_src_path_name is what cicc
// hashes into internal names; nvcc passes the absolute path, and cicc
// takes the last one given.
var (
	ptxArgs    = []string{"-ptx", "-arch=compute_80", "-Xcicc", "--orig_src_path_name", "-Xcicc", "<name>.cu"}
	fatbinArgs = []string{"-fatbin", "-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_80,code=sm_90", "-gencode=arch=compute_80,code=compute_80"}
)

// Hash is the cache key of source compiled by the given nvcc.
func Hash(version, source string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%q\n%q\n%q\n", version, codegen.NVCCFlags, fatbinArgs, ptxArgs)
	h.Write([]byte(source))
	return hex.EncodeToString(h.Sum(nil))
}

// hashLine is line 2 of the PTX and of the stamp.
func hashLine(hash string) string { return "// ngen nvcc input sha256 " + hash }

// stamp is the stamp file's text.
func stamp(header, hash, version string) []byte {
	return []byte(header + "\n" + hashLine(hash) + "\n// " + version + "\n")
}

// Compile returns the fatbin and PTX of source, the .cu that ngen writes
// as dir/name.cu (named so in nvcc's output and messages). It reuses dir's
// files when their recorded hash matches, then the cache, and runs nvcc
// otherwise.
func Compile(version, source, header, dir, name string) (*Result, error) {
	hash := Hash(version, source)
	if r := existing(dir, name, hash); r != nil {
		return r, nil
	}
	cache := ""
	if base, err := os.UserCacheDir(); err == nil {
		cache = filepath.Join(base, "ngen", "nvcc", hash)
		fb, err := os.ReadFile(filepath.Join(cache, name+".fatbin"))
		if err == nil && len(fb) > 0 {
			return &Result{Fatbin: fb, Stamp: stamp(header, hash, version), Hash: hash, Cached: true}, nil
		}
	}
	fb, ptx, err := build(source, header, name, hash)
	if err != nil {
		return nil, err
	}
	r := &Result{Fatbin: fb, Stamp: stamp(header, hash, version), PTX: ptx, Hash: hash}
	if cache != "" {
		// Best effort: a cache that cannot be written only costs time.
		if os.MkdirAll(cache, 0o755) == nil {
			writeAtomic(filepath.Join(cache, name+".fatbin"), fb)
		}
	}
	return r, nil
}

// build runs nvcc in a temporary directory: the .cu to PTX, then that PTX
// (with ngen's header) to the fatbin.
func build(source, header, name, hash string) (fatbin, ptx []byte, err error) {
	tmp, err := os.MkdirTemp("", "ngen-nvcc-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, name+".cu"), []byte(source), 0o644); err != nil {
		return nil, nil, err
	}
	run := func(dir string, args ...string) error {
		cmd := exec.Command("nvcc", args...)
		cmd.Dir = dir
		if msg, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nvcc %s: %v\n%s", strings.Join(args, " "), err, msg)
		}
		return nil
	}
	var args []string
	for _, a := range ptxArgs {
		args = append(args, strings.ReplaceAll(a, "<name>", name))
	}
	args = append(append(args, codegen.NVCCFlags...), "-o", "raw.ptx", name+".cu")
	if err := run(tmp, args...); err != nil {
		return nil, nil, err
	}
	raw, err := os.ReadFile(filepath.Join(tmp, "raw.ptx"))
	if err != nil {
		return nil, nil, err
	}
	ptx = append([]byte(header+"\n"+hashLine(hash)+"\n"), baseFileNames(raw)...)
	if bytes.Contains(ptx, []byte(filepath.Base(tmp))) {
		return nil, nil, fmt.Errorf("nvcc: the PTX of %s.cu names the build directory %s, so it would differ from machine to machine", name, tmp)
	}
	// ptxas records the modification time of every .file it can find, so
	// the fatbin is assembled where none can be found. Its PTX image is the
	// file ngen commits, header included.
	asm := filepath.Join(tmp, "fatbin")
	if err := os.Mkdir(asm, 0o755); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(asm, name+".ptx"), ptx, 0o644); err != nil {
		return nil, nil, err
	}
	args = append(append(append([]string{}, fatbinArgs...), codegen.NVCCFlags...), "-o", name+".fatbin", name+".ptx")
	if err := run(asm, args...); err != nil {
		return nil, nil, err
	}
	fatbin, err = os.ReadFile(filepath.Join(asm, name+".fatbin"))
	if err != nil {
		return nil, nil, err
	}
	if bytes.Contains(fatbin, []byte(filepath.Base(tmp))) {
		return nil, nil, fmt.Errorf("nvcc: the fatbin of %s.cu names the build directory %s, so it would differ from machine to machine", name, tmp)
	}
	return fatbin, ptx, nil
}

// fileLineRE matches a PTX .file directive (line information's file table).
var fileLineRE = regexp.MustCompile(`(?m)^(\s*\.file\s+\d+\s+")([^"]*)"`)

// baseFileNames reduces every .file path to its base name: the .cu becomes
// "<name>.cu", which a profiler resolves against generated/<name>, and the
// CUDA headers that inlined code comes from lose their install directory,
// so nothing about the machine (paths, or the files' modification times,
// which ptxas looks up) reaches the binaries.
func baseFileNames(ptx []byte) []byte {
	return fileLineRE.ReplaceAllFunc(ptx, func(m []byte) []byte {
		sub := fileLineRE.FindSubmatch(m)
		return []byte(string(sub[1]) + filepath.Base(string(sub[2])) + `"`)
	})
}

// Existing returns dir's fatbin and stamp when the stamp records the hash
// of source, for a machine without nvcc that regenerates an unchanged
// model.
func Existing(dir, name, version, source string) *Result {
	hash, ok := recordedHash(filepath.Join(dir, StampFile(name)))
	if !ok {
		return nil
	}
	// Without nvcc the version is unknown: trust the recorded hash if the
	// source part matches what was compiled, which the hash of the
	// recorded version checks.
	v := recordedVersion(dir, name)
	if version != "" {
		v = version
	}
	if Hash(v, source) != hash {
		return nil
	}
	return existing(dir, name, hash)
}

func existing(dir, name, hash string) *Result {
	if got, ok := recordedHash(filepath.Join(dir, StampFile(name))); !ok || got != hash {
		return nil
	}
	gz, err1 := os.ReadFile(filepath.Join(dir, codegen.FatbinFile(name)))
	st, err2 := os.ReadFile(filepath.Join(dir, StampFile(name)))
	if err1 != nil || err2 != nil || len(gz) == 0 {
		return nil
	}
	fb, err := (&runtime.Module{Name: name, FatbinGz: gz}).FatbinImage()
	if err != nil || len(fb) == 0 {
		return nil
	}
	return &Result{Fatbin: fb, Stamp: st, Hash: hash, Cached: true}
}

// recordedHash reads line 2 of a stamp ngen wrote.
func recordedHash(path string) (string, bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan()
	if !sc.Scan() {
		return "", false
	}
	h, ok := strings.CutPrefix(sc.Text(), "// ngen nvcc input sha256 ")
	return h, ok
}

// recordedVersion finds nvcc's version line in the stamp
// ("// Cuda compilation tools, release 11.8, V11.8.89").
func recordedVersion(dir, name string) string {
	data, err := os.ReadFile(filepath.Join(dir, StampFile(name)))
	if err != nil {
		return ""
	}
	for _, l := range bytes.Split(data[:min(len(data), 2048)], []byte("\n")) {
		if s, ok := strings.CutPrefix(string(l), "// Cuda compilation tools, "); ok {
			return "Cuda compilation tools, " + s
		}
	}
	return ""
}

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(f.Name())
		return err
	}
	return os.Rename(f.Name(), path)
}
