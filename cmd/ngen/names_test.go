package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// tinyModel is a model file declaring one tiny model per name.
func tinyModel(pkg string, names ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "package %s\n\nimport \"github.com/ngen-ml/ngen/dsl\"\n\n", pkg)
	for i, n := range names {
		fmt.Fprintf(&b, `func M%d() *dsl.Model {
	m := dsl.NewModel(%q)
	x := m.Input("x", dsl.F32, dsl.Batch, 2)
	y := m.Labels("y", dsl.Batch)
	logits := m.Linear("fc", x, 2)
	m.Output(logits)
	m.Loss(dsl.CrossEntropy(logits, y))
	m.Optimizer(dsl.SGD{LR: 0.1})
	return m
}

`, i, n)
	}
	return b.String()
}

// tempModule makes a module that uses this repository through a replace
// directive, with the given files.
func tempModule(t *testing.T, files map[string]string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// This repository's requirements, so the module graph is complete
	// without the network.
	files["go.mod"] = strings.Replace(string(mod), "module github.com/ngen-ml/ngen", "module example.com/user", 1) +
		"\nrequire github.com/ngen-ml/ngen v0.0.0\n\nreplace github.com/ngen-ml/ngen => " + root + "\n"
	files["go.sum"] = string(sum)
	for name, src := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestBuildHostileNamesLink: models whose names the go tool used to ignore
// or refuse (leading _ or ., non-ASCII, _test and GOOS/GOARCH suffixes,
// init, _, emoji), built with and without -suffix _test, and two models of
// one name in different directories all generate packages that one program
// imports, builds and links.
func TestBuildHostileNamesLink(t *testing.T) {
	if testing.Short() {
		t.Skip("builds cgo packages")
	}
	hostile := []string{"_x", ".hidden", "__global__", "net_windows", "x_linux_arm64", "init", "y_test", "main", "func"}
	dir := tempModule(t, map[string]string{
		"hostile/model.go": tinyModel("hostile", hostile...),
		"emoji/model.go":   tinyModel("emoji", "🙂"),
		"han/model.go":     tinyModel("han", "模型"),
		"suffix/model.go":  tinyModel("suffix", "z"),
		"under/model.go":   tinyModel("under", "_"),
		"one/model.go":     tinyModel("one", "same"),
		"two/model.go":     tinyModel("two", "same"),
	})
	gen := filepath.Join(dir, "gen")
	for _, b := range [][]string{
		{"-o", gen, filepath.Join(dir, "hostile", "model.go")},
		{"-o", gen, "-suffix", "_test", filepath.Join(dir, "suffix", "model.go")},
		{"-o", filepath.Join(gen, "h"), filepath.Join(dir, "han", "model.go")},
		{"-o", filepath.Join(gen, "e"), filepath.Join(dir, "emoji", "model.go")},
		{"-o", filepath.Join(gen, "u"), filepath.Join(dir, "under", "model.go")},
		{"-o", filepath.Join(gen, "one"), filepath.Join(dir, "one", "model.go")},
		{"-o", filepath.Join(gen, "two"), filepath.Join(dir, "two", "model.go")},
	} {
		if err := build(b); err != nil {
			t.Fatalf("ngen build %v: %v", b, err)
		}
	}
	// Every generated directory must be a package whose Go files the go
	// tool builds on this platform and that a program can import: go vet
	// type-checks such a program without compiling the C++ of each.
	var imports []string
	err := filepath.WalkDir(gen, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() || p == gen {
			return err
		}
		if _, err := os.Stat(filepath.Join(p, "plan.json")); err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		imports = append(imports, "example.com/user/"+filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := len(hostile) + 6; len(imports) != want {
		t.Fatalf("%d generated packages, want %d: %v", len(imports), want, imports)
	}
	run := func(prog string, imports []string, args ...string) {
		t.Helper()
		var imps, uses []string
		for i, p := range imports {
			imps = append(imps, fmt.Sprintf("p%d %q", i, p))
			uses = append(uses, fmt.Sprintf("p%d.New", i))
		}
		src := "package main\n\nimport (\n\t" + strings.Join(imps, "\n\t") + "\n)\n\nvar _ = []any{" + strings.Join(uses, ", ") + "}\n\nfunc main() {}\n"
		if err := os.MkdirAll(filepath.Join(dir, prog), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, prog, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("go", append(args, "./"+prog)...)
		cmd.Dir = dir
		if args[0] == "vet" {
			// vet compiles each package's host C++ too: one copy of
			// each launcher (no AVX2 clones) halves that, and the
			// names are all this checks. The link below keeps both.
			cmd.Env = append(os.Environ(), "CGO_CXXFLAGS="+os.Getenv("CGO_CXXFLAGS")+" -DNGEN_EMU_NO_CLONES=1")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v of a program importing %v: %v\n%s", args, imports, err, out)
		}
	}
	run("all", imports, "vet")
	// Two packages named "same" link into one binary: their C entry
	// points differ.
	run("link", []string{"example.com/user/gen/one/same", "example.com/user/gen/two/same"}, "build", "-o", os.DevNull)
}

// TestBuildNameCollision: two models of one file that become one package
// are an error that names both, and nothing is written.
func TestBuildNameCollision(t *testing.T) {
	dir := tempModule(t, map[string]string{"m/model.go": tinyModel("m", "a-b", "a_b")})
	out := filepath.Join(dir, "gen")
	err := build([]string{"-o", out, filepath.Join(dir, "m", "model.go")})
	if err == nil || !strings.Contains(err.Error(), `model "a-b" (m/model.go:6) and model "a_b" (m/model.go:17) both become package "a_b"`) {
		t.Fatalf("err = %v", err)
	}
	if _, serr := os.Stat(out); !os.IsNotExist(serr) {
		t.Errorf("%s written after the error", out)
	}
}
