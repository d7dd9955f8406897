// Package eval evaluates a model file: it loads the file's package with
// go/packages, finds the exported functions declared in that file that
// return *dsl.Model, runs them in a throw-away main program and reads the
// declared models back as JSON. Nothing is written into the user's tree:
// the main program reaches the module through go run -overlay.
package eval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
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
		var msgs []string
		for _, e := range pkg.Errors {
			msgs = append(msgs, e.Error())
		}
		return nil, fmt.Errorf("%s does not compile:\n%s", file, strings.Join(msgs, "\n"))
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
		ptr, ok := sig.Results().At(0).Type().(*types.Pointer)
		if !ok {
			continue
		}
		named, ok := ptr.Elem().(*types.Named)
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

func run(modDir, pkgPath string, funcs []string) ([]*ir.Model, error) {
	var src bytes.Buffer
	src.WriteString("package main\n\nimport (\n\t\"encoding/json\"\n\t\"fmt\"\n\t\"os\"\n\n\t\"github.com/ngen-ml/ngen/compiler/ir\"\n")
	fmt.Fprintf(&src, "\tuser %q\n)\n\nfunc main() {\n\tvar out []*ir.Model\n", pkgPath)
	for _, f := range funcs {
		fmt.Fprintf(&src, "\tif m, err := user.%s().Build(); err != nil {\n\t\tfmt.Fprintln(os.Stderr, err)\n\t\tos.Exit(3)\n\t} else {\n\t\tout = append(out, m)\n\t}\n", f)
	}
	src.WriteString("\tif err := json.NewEncoder(os.Stdout).Encode(out); err != nil {\n\t\tfmt.Fprintln(os.Stderr, err)\n\t\tos.Exit(1)\n\t}\n}\n")
	tmp, err := os.MkdirTemp("", "ngen-eval-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	sum := sha256.Sum256(src.Bytes())
	// The main package must sit inside the module to import it; the
	// overlay makes the go command see it there without writing it.
	virt := filepath.Join(modDir, ".ngen-eval-"+hex.EncodeToString(sum[:6]), "main.go")
	real := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(real, src.Bytes(), 0o644); err != nil {
		return nil, err
	}
	ov, _ := json.Marshal(map[string]any{"Replace": map[string]string{virt: real}})
	ovFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("go", "run", "-overlay", ovFile, virt)
	cmd.Dir = modDir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 3 {
			return nil, fmt.Errorf("%s", msg)
		}
		return nil, fmt.Errorf("evaluating %s: %v\n%s", pkgPath, err, msg)
	}
	var models []*ir.Model
	if err := json.Unmarshal(stdout.Bytes(), &models); err != nil {
		return nil, fmt.Errorf("evaluating %s: bad output: %v", pkgPath, err)
	}
	return models, nil
}
