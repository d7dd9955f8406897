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
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"

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
	if _, err := os.Stat(abs); err != nil {
		return nil, err
	}
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo | packages.NeedFiles | packages.NeedModule, Dir: filepath.Dir(abs)}
	pkgs, err := packages.Load(cfg, "file="+abs)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", file, err)
	}
	if len(pkgs) != 1 {
		return nil, fmt.Errorf("loading %s: found %d packages", file, len(pkgs))
	}
	pkg := pkgs[0]
	if len(pkg.Errors) > 0 {
		return nil, fmt.Errorf("%s does not compile:\n%s", file, loadErrors(pkg))
	}
	if pkg.Name == "main" {
		return nil, fmt.Errorf("%s: model files must not be in package main", file)
	}
	funcs := declarers(pkg, abs)
	if len(funcs) == 0 {
		return nil, fmt.Errorf("%s declares no exported func() *dsl.Model", file)
	}
	if pkg.Module == nil {
		return nil, fmt.Errorf("%s is not inside a Go module", file)
	}
	return run(pkg.Module.Dir, pkg.PkgPath, funcs)
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
// the model, and writes the models as JSON to the file named by its
// argument and every DSL error to stderr (exit status 3). A model package
// that prints (to stdout or anywhere) cannot corrupt the JSON, and one that
// exits leaves no file, which reads as what it is.
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
	failed := false
	var out []*ir.Model
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
			fmt.Fprintf(os.Stderr, "%s returned a nil *dsl.Model\n", f.name)
			failed = true
			continue
		}
		m, err := dm.Build()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			failed = true
			continue
		}
		out = append(out, m)
	}
	if failed {
		os.Exit(3)
	}
	b, err := json.Marshal(out)
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
// that a failure to build (reported with positions), a DSL error (exit
// status 3) and a panic in user code read differently.
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
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 {
			return nil, errors.New(msg)
		}
		return nil, fmt.Errorf("evaluating %s: %v\n%s", pkgPath, err, msg)
	}
	js, err := os.ReadFile(result)
	if err != nil {
		return nil, fmt.Errorf("evaluating %s: the model package exited before ngen read its models (does a model function or init call os.Exit?)\n%s", pkgPath, strings.TrimSpace(stderr.String()))
	}
	var models []*ir.Model
	if err := json.Unmarshal(js, &models); err != nil {
		return nil, fmt.Errorf("evaluating %s: bad output: %v", pkgPath, err)
	}
	return models, nil
}
