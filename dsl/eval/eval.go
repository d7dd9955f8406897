// Package eval evaluates a model file for the ngen command: it loads the
// file's package with go/packages, finds the exported functions declared in
// that file whose type is func() *dsl.Model, runs them in a throw-away main
// program and reads the declared models back as JSON (ir.Model's JSON
// form). Nothing is written into the user's tree: the main program reaches
// the module through go build -overlay.
//
// Pipeline: DSL → eval (this package) → IR → passes → kernels → glue → runtime.
package eval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/build"
	constraintpkg "go/build/constraint"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/tools/go/packages"

	"github.com/ngen-ml/ngen/compiler/ir"
)

const dslPath = "github.com/ngen-ml/ngen/dsl"

// Models evaluates every model declared in file.
func Models(file string) ([]*ir.Model, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		return nil, fmt.Errorf("%s is a directory: give the .go file that declares the model", file)
	case !strings.HasSuffix(abs, ".go"):
		return nil, fmt.Errorf("%s is not a Go file: give the .go file that declares the model", file)
	case strings.HasSuffix(abs, "_test.go"):
		return nil, fmt.Errorf("%s is a test file, which go build leaves out of its package: declare the model in a file without the _test.go suffix", file)
	}
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo | packages.NeedFiles | packages.NeedModule, Dir: filepath.Dir(abs)}
	pkgs, err := packages.Load(cfg, "file="+abs)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", file, err)
	}
	if len(pkgs) != 1 || pkgs[0].PkgPath == adHoc || pkgs[0].Module == nil {
		// go list found no package, or made one of the file alone: it is
		// not in a package that the evaluator could import.
		if err := notImportable(file, abs); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("loading %s: found %d packages", file, len(pkgs))
	}
	pkg := pkgs[0]
	if len(pkg.Errors) > 0 {
		msg := loadErrors(pkg)
		if strings.Contains(msg, "could not import "+dslPath) {
			// go list's words for a module that does not require ngen.
			msg += fmt.Sprintf("\n(the module %s does not provide %s: add it with go get github.com/ngen-ml/ngen)", pkg.Module.Path, dslPath)
		}
		return nil, fmt.Errorf("%s does not compile:\n%s", file, msg)
	}
	if pkg.Name == "main" {
		return nil, fmt.Errorf("%s: model files must not be in package main", file)
	}
	funcs := declarers(pkg, abs)
	if len(funcs) == 0 {
		return nil, fmt.Errorf("%s declares no exported func() *dsl.Model", file)
	}
	return run(pkg.Module.Dir, pkg.PkgPath, funcs)
}

// adHoc is the import path go list gives a file that is in no importable
// package.
const adHoc = "command-line-arguments"

// notImportable says why the package of the file at abs (as the user gave
// it, file) cannot be imported: no go.mod above it, a directory that is
// not a valid import path element (a space, an accent, a quote, a *), or
// a build constraint that leaves the file out of its package; nil when it
// finds none of these.
func notImportable(file, abs string) error {
	dir := filepath.Dir(abs)
	root := dir
	for {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			break
		}
		up := filepath.Dir(root)
		if up == root {
			return fmt.Errorf("%s is not inside a Go module (no go.mod in its directory or above): ngen evaluates the model by importing its package", file)
		}
		root = up
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return err
	}
	modPath := modfile.ModulePath(gomod)
	rel, err := filepath.Rel(root, dir)
	if err != nil {
		return err
	}
	path := modPath
	if rel != "." {
		path += "/" + filepath.ToSlash(rel)
	}
	if err := module.CheckImportPath(path); err != nil {
		for d := rel; d != "." && d != string(filepath.Separator); d = filepath.Dir(d) {
			if module.CheckImportPath(modPath+"/"+filepath.ToSlash(filepath.Base(d))) != nil {
				return fmt.Errorf("%s: its directory %q cannot be in a Go import path (%v), so its package cannot be imported: rename the directory", file, filepath.Base(d), err)
			}
		}
		return fmt.Errorf("%s: its package's import path %q is not valid (%v), so the package cannot be imported", file, path, err)
	}
	if ok, err := build.Default.MatchFile(dir, filepath.Base(abs)); err == nil && !ok {
		what := "its file name (a _GOOS or _GOARCH suffix)"
		if c := constraint(abs); c != "" {
			what = "its build constraint " + c
		}
		return fmt.Errorf("%s is left out of its package by %s, so its models cannot be imported: remove the constraint (ngen evaluates the package as go build sees it)", file, what)
	}
	return nil
}

// constraint is the file's //go:build line, or "".
func constraint(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if constraintpkg.IsGoBuild(line) || constraintpkg.IsPlusBuild(line) {
			return line
		}
		if strings.HasPrefix(line, "package ") {
			break
		}
	}
	return ""
}

// loadErrors lists a package's errors once each: the go command's own
// report of a type error is dropped when the type checker gave it with a
// position. Positions are made relative to the module root, as the DSL's.
func loadErrors(pkg *packages.Package) string {
	var typed, other []string
	seen := map[string]bool{}
	for _, e := range pkg.Errors {
		pos := e.Pos
		if pkg.Module != nil && pkg.Module.Dir != "" {
			if rel, err := filepath.Rel(pkg.Module.Dir, pos); err == nil && !strings.HasPrefix(rel, "..") {
				pos = filepath.ToSlash(rel)
			}
		}
		msg := e.Msg
		if pos != "" && pos != "-" {
			msg = pos + ": " + e.Msg
		}
		if seen[msg] {
			continue
		}
		seen[msg] = true
		if e.Kind == packages.TypeError || e.Kind == packages.ParseError {
			typed = append(typed, msg)
		} else {
			other = append(other, msg)
		}
	}
	if len(typed) > 0 {
		return strings.Join(typed, "\n")
	}
	return strings.Join(other, "\n")
}

// declarers lists exported funcs of file with the signature
// func() *dsl.Model, checked by type, sorted by position.
func declarers(pkg *packages.Package, file string) []string {
	var names []string
	scope := pkg.Types.Scope()
	for _, n := range scope.Names() {
		fn, ok := scope.Lookup(n).(*types.Func)
		if !ok || !fn.Exported() {
			continue
		}
		if pos := pkg.Fset.Position(fn.Pos()); filepath.Clean(pos.Filename) != filepath.Clean(file) {
			continue
		}
		sig := fn.Type().(*types.Signature)
		if sig.Params().Len() != 0 || sig.Results().Len() != 1 || sig.Recv() != nil {
			continue
		}
		ptr, ok := types.Unalias(sig.Results().At(0).Type()).(*types.Pointer)
		if !ok {
			continue
		}
		named, ok := types.Unalias(ptr.Elem()).(*types.Named)
		if !ok || named.Obj().Pkg() == nil || named.Obj().Pkg().Path() != dslPath || named.Obj().Name() != "Model" {
			continue
		}
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		return scope.Lookup(names[i]).Pos() < scope.Lookup(names[j]).Pos()
	})
	return names
}

// mainSrc is the throw-away program: it calls each declaring func, builds
// the model, and writes the models and every DSL error as JSON to the file
// named by its argument. A model package that prints (to stdout or
// anywhere) cannot corrupt the JSON, and one that exits, with any status,
// leaves no file, which reads as what it is.
func mainSrc(pkgPath string, funcs []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/dsl"

	user %q
)

func main() {
	os.Stdout = os.Stderr
	var res struct {
		Models []*ir.Model
		Errors []string
	}
	for _, f := range []struct {
		name string
		fn   func() *dsl.Model
	}{
`, pkgPath)
	for _, f := range funcs {
		fmt.Fprintf(&b, "\t\t{%q, user.%s},\n", f, f)
	}
	b.WriteString(`	} {
		dm := f.fn()
		if dm == nil {
			res.Errors = append(res.Errors, fmt.Sprintf("%s returned a nil *dsl.Model", f.name))
			continue
		}
		m, err := dm.Build()
		if err != nil {
			res.Errors = append(res.Errors, err.Error())
			continue
		}
		res.Models = append(res.Models, m)
	}
	b, err := json.Marshal(res)
	if err == nil {
		err = os.WriteFile(os.Args[1], b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`)
	return b.Bytes()
}

// run builds the program with go build -overlay and runs the binary, so
// that a failure to build (reported with positions), a DSL error (in the
// result file), a panic and an exit in user code read differently.
func run(modDir, pkgPath string, funcs []string) ([]*ir.Model, error) {
	src := mainSrc(pkgPath, funcs)
	tmp, err := os.MkdirTemp("", "ngen-eval-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	sum := sha256.Sum256(src)
	// The main package must sit inside the module to import it. The
	// overlay makes the go command see it at a path in the module that
	// does not exist (go build accepts overlaid files in non-existent
	// directories), so nothing is ever written into the user's tree.
	virt := filepath.Join(modDir, ".ngen-eval-"+hex.EncodeToString(sum[:6]), "main.go")
	real := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(real, src, 0o644); err != nil {
		return nil, err
	}
	ov, err := json.Marshal(map[string]any{"Replace": map[string]string{virt: real}})
	if err != nil {
		return nil, err
	}
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
		return nil, err
	}
	bin := filepath.Join(tmp, "eval")
	if goruntime.GOOS == "windows" {
		bin += ".exe"
	}
	build := exec.Command("go", "build", "-overlay", ovFile, "-o", bin, virt)
	build.Dir = modDir
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the evaluator for %s: %v\n%s", pkgPath, err, strings.TrimSpace(string(out)))
	}
	result := filepath.Join(tmp, "models.json")
	cmd := exec.Command(bin, result)
	cmd.Dir = modDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	msg := strings.TrimSpace(stderr.String())
	js, err := os.ReadFile(result)
	if err != nil {
		// No result: the process ended before main wrote it, by a panic
		// (whose trace is on stderr) or an os.Exit in user code, which
		// says nothing and may use any status.
		how := "exited"
		if runErr != nil {
			how = fmt.Sprintf("ended (%v)", runErr)
		}
		if ee, ok := runErr.(*exec.ExitError); ok && ee.ExitCode() == 2 && strings.Contains(msg, "panic:") {
			return nil, fmt.Errorf("evaluating %s: a model function panicked:\n%s", pkgPath, msg)
		}
		text := fmt.Sprintf("evaluating %s: the model package %s before ngen read its models: does a model function or init call os.Exit?", pkgPath, how)
		if msg != "" {
			text += "\n" + msg
		}
		return nil, errors.New(text)
	}
	if runErr != nil {
		return nil, fmt.Errorf("evaluating %s: %v\n%s", pkgPath, runErr, msg)
	}
	var res struct {
		Models []*ir.Model
		Errors []string
	}
	if err := json.Unmarshal(js, &res); err != nil {
		return nil, fmt.Errorf("evaluating %s: bad output: %v", pkgPath, err)
	}
	if len(res.Errors) > 0 {
		return nil, errors.New(strings.Join(res.Errors, "\n"))
	}
	return res.Models, nil
}
