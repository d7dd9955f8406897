package eval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// moduleEntries lists the module root, to check evaluation writes nothing
// there.
func moduleEntries(t *testing.T) string {
	t.Helper()
	es, err := os.ReadDir(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}

func TestModels(t *testing.T) {
	before := moduleEntries(t)
	models, err := Models(filepath.Join("testdata", "good", "model.go"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range models {
		got = append(got, m.Name)
		if m.Source != "dsl/eval/testdata/good/model.go" {
			t.Errorf("%s: Source = %q", m.Name, m.Source)
		}
		if m.Loss == nil || m.Output == nil || m.Optimizer == nil {
			t.Errorf("%s: incomplete after the JSON round trip: %+v", m.Name, m)
		}
	}
	// Declaration order; unexported, wrongly typed and other files' funcs
	// are skipped; an alias of *dsl.Model counts.
	if strings.Join(got, " ") != "tiny second" {
		t.Fatalf("models %v, want [tiny second]", got)
	}
	if w := models[0].Forward.Lookup(2, "fc.weight"); w == nil || w.Shape.String() != "[3,4]" {
		t.Fatalf("tiny: fc.weight = %v", w)
	}
	if after := moduleEntries(t); after != before {
		t.Fatalf("evaluation wrote into the module:\nbefore %s\nafter  %s", before, after)
	}
}

func TestModelsErrors(t *testing.T) {
	for _, tc := range []struct{ dir, want string }{
		{"shapeerr", "matmul (dsl/eval/testdata/shapeerr/model.go:11): inner dimensions differ: [B,784] × [512,100]"},
		{"broken", "dsl/eval/testdata/broken/model.go:8:22: cannot use 42"},
		// Issue 13: these panicked or read as "bad output: unexpected end
		// of JSON input".
		{"nilmodel", "Missing returned a nil *dsl.Model"},
		{"exits", "exited before ngen read its models"},
		{"niltensor", "output (dsl/eval/testdata/niltensor/model.go:12): the tensor is nil"},
	} {
		_, err := Models(filepath.Join("testdata", tc.dir, "model.go"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.dir, err, tc.want)
		}
		if err != nil && strings.Count(err.Error(), tc.want) != 1 {
			t.Errorf("%s: error repeated: %v", tc.dir, err)
		}
	}
	if _, err := Models(filepath.Join("testdata", "good", "other_missing.go")); err == nil {
		t.Errorf("missing file accepted")
	}
	if _, err := Models("eval.go"); err == nil || !strings.Contains(err.Error(), "declares no exported func() *dsl.Model") {
		t.Errorf("file without models: %v", err)
	}
}

// TestModelPrints: a model package that prints to stdout (in init and in
// the model function) still evaluates.
func TestModelPrints(t *testing.T) {
	models, err := Models(filepath.Join("testdata", "prints", "model.go"))
	if err != nil || len(models) != 1 || models[0].Name != "chatty" {
		t.Fatalf("models %v, err %v", models, err)
	}
}

// TestModelsDiagnoses (issue 27): ngen build said "is not inside a Go
// module" for files that are, when a directory had a space, an accent, a
// quote or a * in its name or the file a build constraint; "found 0
// packages" for a _test.go file, a directory or a non-Go file; and nothing
// at all for a model that called os.Exit(3). Each now says what is wrong.
func TestModelsDiagnoses(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "good", "model.go"))
	if err != nil {
		t.Fatal(err)
	}
	// Directories inside the module, made here: a checkout need not hold
	// such names.
	ws, err := os.MkdirTemp("testdata", "names-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	put := func(dir, name string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(ws, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(ws, dir, name)
		if err := os.WriteFile(p, good, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	outside := filepath.Join(t.TempDir(), "model.go")
	if err := os.WriteFile(outside, good, 0o644); err != nil {
		t.Fatal(err)
	}
	// A module of its own that does not require ngen.
	alone := t.TempDir()
	if err := os.WriteFile(filepath.Join(alone, "go.mod"), []byte("module example.com/alone\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(alone, "model.go"), good, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ file, want string }{
		{put("a b", "model.go"), `its directory "a b" cannot be in a Go import path (malformed import path "github.com/ngen-ml/ngen/dsl/eval/testdata/` + filepath.Base(ws) + `/a b": invalid char ' ')`},
		{put("é", "model.go"), `its directory "é" cannot be in a Go import path`},
		{put("q'x", "model.go"), `its directory "q'x" cannot be in a Go import path`},
		{put("st*r", "model.go"), `its directory "st*r" cannot be in a Go import path`},
		{filepath.Join("testdata", "tagged", "model.go"), "is left out of its package by its build constraint //go:build ignore"},
		{put("tests", "model_test.go"), "is a test file, which go build leaves out of its package"},
		{filepath.Join("testdata", "good"), "is a directory: give the .go file"},
		{put("text", "model.txt"), "is not a Go file"},
		{outside, "is not inside a Go module (no go.mod in its directory or above)"},
		{filepath.Join(alone, "model.go"), "the module example.com/alone does not provide github.com/ngen-ml/ngen/dsl: add it with go get github.com/ngen-ml/ngen"},
		{filepath.Join("testdata", "exitstatus", "model.go"), "the model package ended (exit status 3) before ngen read its models: does a model function or init call os.Exit?"},
	} {
		_, err := Models(tc.file)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant %q", tc.file, err, tc.want)
		}
	}
}
