package codegen

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/dsl/eval"
	"github.com/ngen-ml/ngen/runtime"
)

// TestOneCommitLaunch checks that convnet_bn's training step, fused and
// unfused, commits its four running statistics in one launch, after the
// guard and in the gradient phase (so once per micro-batch), and that the
// commit kernel skips on a failed step before writing any of them.
func TestOneCommitLaunch(t *testing.T) {
	models, err := eval.Models(filepath.Join("..", "models", "convnet", "model.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range models {
		if m.Name != "convnet_bn" {
			continue
		}
		for _, fuse := range []bool{true, false} {
			p, err := compiler.Compile(m, compiler.Options{Fuse: fuse, RefBatch: 128})
			if err != nil {
				t.Fatal(err)
			}
			src, plan, err := Kernels(p)
			if err != nil {
				t.Fatal(err)
			}
			var f *runtime.Func
			for i := range plan.Funcs {
				if plan.Funcs[i].Name == "step" {
					f = &plan.Funcs[i]
				}
			}
			if f == nil {
				t.Fatal("no step function")
			}
			guard, commit := -1, -1
			var names []string
			for i, st := range f.Steps {
				switch st.Builtin {
				case runtime.GuardKernel:
					guard = i
				case runtime.CommitKernel:
					if commit >= 0 {
						t.Errorf("fuse=%v: commit launches at steps %d and %d, want one", fuse, commit, i)
					}
					commit = i
					for _, c := range st.Commits {
						names = append(names, plan.Buffers[c.Dst].Name)
					}
				}
			}
			sort.Strings(names)
			want := "bn1.running_mean bn1.running_var bn2.running_mean bn2.running_var"
			if got := strings.Join(names, " "); got != want {
				t.Errorf("fuse=%v: commit writes %q, want %q", fuse, got, want)
			}
			if !(guard >= 0 && guard < commit && commit < f.UpdateFrom) {
				t.Errorf("fuse=%v: guard at %d, commit at %d, update from %d: want guard < commit < update", fuse, guard, commit, f.UpdateFrom)
			}
			body := src[strings.Index(src, "void __launch_bounds__(256) ngen_commit("):]
			body = body[:strings.Index(body, "\n}\n")]
			if r, w := strings.Index(body, "return;"), strings.Index(body, "dst0[i] ="); r < 0 || w < 0 || r > w {
				t.Errorf("fuse=%v: the commit kernel does not return before its first write:\n%s", fuse, body)
			}
		}
		return
	}
	t.Fatal("no model convnet_bn")
}
