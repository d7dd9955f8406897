// Package emu holds ngen_emu.h, the header that lets the generated CUDA C
// compile and run on the host for the CPU backend (runtime/cpu). The code
// generator copies Header next to every generated .cu; runtime/cpu's
// CompileModule does the same for kernels compiled at run time.
//
// The package is pure Go so that the generator can embed the header without
// cgo.
package emu

import (
	_ "embed"
	"strings"
)

// Header is the text of ngen_emu.h, with ngen_half.h's text in place of
// its #include line.
var Header = strings.Replace(emuHeader, "#include \"ngen_half.h\"\n", HalfHeader, 1)

//go:embed ngen_emu.h
var emuHeader string

// HalfHeader is the text of ngen_half.h: __half and __nv_bfloat16 for the
// kernels, CUDA's own headers under nvcc and their bit-exact emulation on
// the host.
//
//go:embed ngen_half.h
var HalfHeader string
