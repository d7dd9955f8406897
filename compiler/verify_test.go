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
