package cpu

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/ngen-ml/ngen/runtime/cpu/emu"
)

// The emulation header is some 70,000 lines once its standard headers are
// in, and g++ spent about 1.3 s of each run-time module's compile parsing
// it: more than half of a small module's time, and the suite compiles a few
// hundred modules on a cold cache. CompileModule therefore precompiles it
// (g++'s precompiled headers), once per compiler, flags and macros defined
// before the include, into the cache beside the modules.
//
// A precompiled header is only valid where the translation unit defines
// the same macros before including it, with the same flags, so the macros
// are read from the entry file's preamble: the lines before its
// `#include "ngen_emu.h"` may only be blank lines, // comments and
// `#define NAME VALUE`. Anything else there, or a files map that brings its
// own ngen_emu.h, compiles the plain way. g++ falls back to parsing the
// header itself whenever it finds the precompiled one unusable, so the
// worst a mismatch can cost is time; the machine code is the same either
// way (TestPrecompiledHeaderSameCode).

// pchDisabled turns precompiled headers off (NGEN_JIT_PCH=0), for timing a
// compile without one.
func pchDisabled() bool { return os.Getenv("NGEN_JIT_PCH") == "0" }

// pchInclude is what an entry file's preamble must end with.
const pchInclude = `#include "ngen_emu.h"`

// pchDefines returns the -D flags the entry's preamble amounts to, and
// whether the entry qualifies at all.
func pchDefines(entry string) ([]string, bool) {
	var defs []string
	for _, line := range strings.Split(entry, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "//"):
		case line == pchInclude:
			return defs, true
		case strings.HasPrefix(line, "#define "):
			f := strings.Fields(strings.TrimPrefix(line, "#define "))
			if len(f) == 0 || len(f) > 2 || !cIdent(f[0]) {
				return nil, false
			}
			if len(f) == 1 {
				defs = append(defs, "-D"+f[0]+"=")
			} else {
				defs = append(defs, "-D"+f[0]+"="+f[1])
			}
		default:
			return nil, false
		}
	}
	return nil, false
}

// precompiledHeader returns the directory that holds ngen_emu.h and its
// precompiled form for this compile, building it the first time, or "" to
// compile without one.
func precompiledHeader(cxx, opt string, files map[string]string, entryFile string) string {
	if pchDisabled() {
		return ""
	}
	if _, own := files["ngen_emu.h"]; own {
		return ""
	}
	defs, ok := pchDefines(files[entryFile])
	if !ok {
		return ""
	}
	args := append(append(append([]string{opt}, defs...), pchFlags()...), "-x", "c++-header", "-o", "ngen_emu.h.gch", "ngen_emu.h")
	dir, err := cacheDir("pch-" + cacheKey(cxx, args, map[string]string{"ngen_emu.h": emu.Header}))
	if err != nil {
		return ""
	}
	if _, err := os.Stat(filepath.Join(dir, "ngen_emu.h.gch")); err == nil {
		return dir
	}
	// build renames the header into dir before its precompiled form, so a
	// reader that finds the .gch finds the header beside it.
	if err := build(dir, cxx, args, map[string]string{"ngen_emu.h": emu.Header}, "ngen_emu.h.gch"); err != nil {
		return ""
	}
	return dir
}

// pchFlags are jitFlags without the ones that only concern linking.
func pchFlags() []string {
	var out []string
	for _, f := range jitFlags {
		if f != "-shared" {
			out = append(out, f)
		}
	}
	return out
}
