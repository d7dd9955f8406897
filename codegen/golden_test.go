package codegen

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.txtar")

// TestGolden checks the generated files of a small model against
// testdata/golden; a change that should not alter kernels must leave these
// files unchanged ("process replay"). go test ./codegen -update rewrites them.
func TestGolden(t *testing.T) {
	for _, fuse := range []bool{true, false} {
		name := "mlp_small_fused"
		if !fuse {
			name = "mlp_small_unfused"
		}
		p, err := compiler.Compile(irtest.MLP(ir.F32, 7, 9, 4, 0.2, irtest.Adam), compiler.Options{Fuse: fuse})
		if err != nil {
			t.Fatal(err)
		}
		files, err := Generate(p, Options{Package: "small"})
		if err != nil {
			t.Fatal(err)
		}
		ar := &txtar.Archive{Comment: []byte("irtest.MLP(f32, 7, 9, 4, dropout 0.2, Adam)\n")}
		for _, f := range []string{"small.cu", "small.go", PlanFile, "host/host.cc", "host/host.go"} {
			ar.Files = append(ar.Files, txtar.File{Name: f, Data: files[f]})
		}
		path := filepath.Join("..", "testdata", "golden", name+".txtar")
		got := txtar.Format(ar)
		if *update {
			os.MkdirAll(filepath.Dir(path), 0o755)
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test ./codegen -update)", err)
		}
		if string(want) != string(got) {
			wa := txtar.Parse(want)
			for i, f := range ar.Files {
				if i >= len(wa.Files) || string(wa.Files[i].Data) != string(f.Data) {
					t.Errorf("%s: %s differs from the golden file (go test ./codegen -update to accept)", name, f.Name)
				}
			}
		}
	}
}
