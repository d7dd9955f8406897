//go:build cuda

package main

// The GPU backend registers itself as "cuda" for -device.
import _ "github.com/ngen-ml/ngen/runtime/cuda"
