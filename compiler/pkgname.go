package compiler

import (
	"go/token"
	"go/types"
	"strings"
)

// PackageName maps a model name (plus any -suffix) to the name of the Go
// package and of its files. The go tool must build and import the result,
// so beyond Sanitize it is lower case; leading underscores go (a file named
// _x.go or .x.go is ignored); an empty result becomes "model" and a leading
// digit gets an "m"; and a trailing "_" is added when the name would end in
// _test or a GOOS/GOARCH word (x_test.go is a test file, net_windows.go
// builds only on Windows) or is a keyword or predeclared identifier, main,
// init or _. Different names may map to one package name; ngen build
// rejects such a pair in one file.
func PackageName(name string) string {
	if name == "" {
		return "model"
	}
	s := strings.TrimLeft(strings.ToLower(Sanitize(name)), "_")
	if s == "" {
		s = "model"
	}
	if s[0] >= '0' && s[0] <= '9' {
		s = "m" + s
	}
	last := s
	if i := strings.LastIndexByte(s, '_'); i >= 0 {
		last = s[i+1:]
	}
	if s != last && (last == "test" || knownOS[last] || knownArch[last]) ||
		token.IsKeyword(s) || types.Universe.Lookup(s) != nil || reservedPkg[s] {
		s += "_"
	}
	return s
}

// reservedPkg are package names the go tool refuses to import or build as
// a library, or that would shadow what the generated files import.
var reservedPkg = map[string]bool{"main": true, "init": true, "_": true, "unsafe": true, "c": true, "embed": true, "documentation": true}

// knownOS and knownArch are the go tool's file-name build constraints
// (go/build's syslist, including names reserved for future ports).
var knownOS = words("aix android darwin dragonfly freebsd hurd illumos ios js linux nacl netbsd openbsd plan9 solaris wasip1 wasip2 windows zos unix")

var knownArch = words("386 amd64 amd64p32 arm armbe arm64 arm64be loong64 mips mipsle mips64 mips64le mips64p32 mips64p32le ppc ppc64 ppc64le riscv riscv64 s390 s390x sparc sparc64 wasm")

func words(s string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(s) {
		m[w] = true
	}
	return m
}
