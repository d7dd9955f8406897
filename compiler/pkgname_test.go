package compiler

import (
	"go/build"
	"go/token"
	"io"
	"strings"
	"testing"
)

// pkgNameSeeds are the names issue 13 found to produce packages the go tool
// ignores or cannot build, plus ordinary ones that must not change.
var pkgNameSeeds = []string{
	"_x", ".hidden", "模型", "__global__", "x_test", "mlp_test", "a_test_", "net_windows", "x_amd64",
	"x_linux_arm64", "x_linux", "m_wasm", "m_js_wasm", "init", "_", "main", "🙂", "", "func", "int",
	"string", "nil", "unsafe", "C", "Model", "mlp", "mlp_unfused", "convnet_bn", "2layer", "_2", "a-b", "a_b",
	"k_", "x.y.z", "TEST", "a\x00b", "x_test_unfused", "x_windows_amd64",
}

func TestPackageName(t *testing.T) {
	for in, want := range map[string]string{
		"mlp": "mlp", "mlp_unfused": "mlp_unfused", "Convnet_BN": "convnet_bn", "_x": "x", ".hidden": "hidden",
		"模型": "model", "__global__": "global__", "x_test": "x_test_", "net_windows": "net_windows_",
		"x_amd64": "x_amd64_", "x_linux_arm64": "x_linux_arm64_", "init": "init_", "_": "model", "main": "main_",
		"🙂": "model", "": "model", "func": "func_", "int": "int_", "_2": "m2", "a-b": "a_b",
	} {
		if got := PackageName(in); got != want {
			t.Errorf("PackageName(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzPackageName: whatever the model name, the package name is a plain
// ASCII Go identifier the go tool builds and imports as a library on every
// platform, and the function is deterministic.
func FuzzPackageName(f *testing.F) {
	for _, s := range pkgNameSeeds {
		f.Add(s)
		f.Add(s + "_test") // as with ngen build -suffix _test
	}
	ctxts := []*build.Context{}
	for _, p := range [][2]string{{"linux", "amd64"}, {"windows", "arm64"}, {"darwin", "arm64"}, {"js", "wasm"}, {"plan9", "386"}} {
		c := build.Default
		c.GOOS, c.GOARCH = p[0], p[1]
		c.OpenFile = func(string) (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("package p\n")), nil }
		ctxts = append(ctxts, &c)
	}
	f.Fuzz(func(t *testing.T, name string) {
		pkg := PackageName(name)
		if pkg != PackageName(name) {
			t.Fatal("not deterministic")
		}
		if again := PackageName(pkg); again != pkg {
			t.Fatalf("%q -> %q -> %q: not idempotent", name, pkg, again)
		}
		if !token.IsIdentifier(pkg) || token.IsKeyword(pkg) || reservedPkg[pkg] {
			t.Fatalf("%q -> %q: not a usable package name", name, pkg)
		}
		for _, r := range pkg {
			if r > 0x7f || (r >= 'A' && r <= 'Z') {
				t.Fatalf("%q -> %q: not lower-case ASCII", name, pkg)
			}
		}
		if pkg[0] == '_' || (pkg[0] >= '0' && pkg[0] <= '9') {
			t.Fatalf("%q -> %q: leading _ or digit", name, pkg)
		}
		for _, file := range []string{pkg + ".go", pkg + ".cu"} {
			if strings.HasSuffix(file, "_test.go") {
				t.Fatalf("%q -> %q: %s is a test file", name, pkg, file)
			}
		}
		for _, c := range ctxts {
			if ok, err := c.MatchFile("/p", pkg+".go"); err != nil || !ok {
				t.Fatalf("%q -> %q: %s.go not built for %s/%s (%v)", name, pkg, pkg, c.GOOS, c.GOARCH, err)
			}
		}
		// Names that are already good package names are kept.
		if low := strings.ToLower(name); low == name && token.IsIdentifier(name) && name[0] != '_' && isASCII(name) &&
			!strings.HasSuffix(name, "_") && !strings.Contains(name, "_test") && pkg != name && pkg != name+"_" {
			t.Fatalf("%q -> %q: a plain name changed", name, pkg)
		}
	})
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] > 0x7f {
			return false
		}
	}
	return true
}
