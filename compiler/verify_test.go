package compiler

import (
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler/ir"
)

func TestVerify(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		break_     func(f *ir.Func)
	}{
		{"dangling use", "not defined before use", func(f *ir.Func) {
			stray := &ir.Value{ID: 999, Op: "param", Shape: ir.Static(1), DType: ir.F32}
			for _, v := range f.Values {
				if v.Op == "relu" {
					v.Args[0] = stray
					return
				}
			}
		}},
		{"wrong shape", "by its shape rule", func(f *ir.Func) {
			for _, v := range f.Values {
				if v.Op == "relu" {
					v.Shape = ir.Static(7)
					return
				}
			}
		}},
		{"wrong dtype", "by its shape rule", func(f *ir.Func) {
			for _, v := range f.Values {
				if v.Op == "relu" {
					v.DType = ir.F64
					return
				}
			}
		}},
	} {
		p := through(t, testMLP(6, 5, 3, 0, adam), "autodiff", true)
		if err := verify(p); err != nil {
			t.Fatalf("%s: valid IR rejected: %v", tc.name, err)
		}
		tc.break_(p.Step)
		err := verify(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: verify = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestVerifyGroups: after fusion the verifier also checks the kernel
// partition, which codegen and memory planning take on trust.
func TestVerifyGroups(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		break_     func(gs []*Group) []*Group
	}{
		{"kernels out of order", "from later kernel", func(gs []*Group) []*Group {
			gs[0], gs[1] = gs[1], gs[0] // the epilogue before its GEMM
			return gs
		}},
		// The update reads every gradient through the flat gradient
		// vector, a view: the check must see through it to the kernels
		// that write its parts.
		{"update before the last gradient", "from later kernel", func(gs []*Group) []*Group {
			n := len(gs)
			gs[n-2], gs[n-1] = gs[n-1], gs[n-2]
			return gs
		}},
		{"value in two kernels", "is in two kernels", func(gs []*Group) []*Group {
			gs[1].Values = append(gs[1].Values, gs[0].Values[0])
			return gs
		}},
		{"value in no kernel", "is in no kernel", func(gs []*Group) []*Group {
			return gs[1:]
		}},
	} {
		p := through(t, testMLP(6, 5, 3, 0.2, adam), "fuse", true)
		p.Groups[p.Step] = tc.break_(p.Groups[p.Step])
		err := verify(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: verify = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestVerifyDanglingRoots: outputs, gradients and updates must refer to
// values of their own function (a pass that rebuilds values and forgets to
// repoint them leaves the old ones behind).
func TestVerifyDanglingRoots(t *testing.T) {
	stray := func() *ir.Value { return &ir.Value{ID: 999, Op: "param", Shape: ir.Static(53), DType: ir.F32} }
	for _, tc := range []struct {
		name, want string
		break_     func(f *ir.Func)
	}{
		{"output", "output loss refers to a dangling value", func(f *ir.Func) { f.Outputs["loss"] = stray() }},
		{"gradient", "refers to a dangling value", func(f *ir.Func) { f.Grads["fc1.bias"] = stray() }},
		{"update", "update refers to a dangling value", func(f *ir.Func) { f.Updates[0].New = stray() }},
		{"update type", "types differ", func(f *ir.Func) { f.Updates[0].New = f.Values[0] }},
	} {
		p := through(t, testMLP(6, 5, 3, 0, adam), "lower optimizer", true)
		tc.break_(p.Step)
		err := verify(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: verify = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
