package codegen

import (
	"go/ast"
	"go/printer"
	"go/token"
	"strings"
	"testing"
)

// TestGoGlueNilModel: every exported method of the generated Model tests
// for a nil or zero Model before it touches one (models/mlp's
// TestNilAndZeroModel calls them); Session alone returns nil for nil.
func TestGoGlueNilModel(t *testing.T) {
	src, err := GoGlue(handPlan("small", "x", "y"), glueOpts)
	if err != nil {
		t.Fatal(err)
	}
	f := check(t, src)
	n := 0
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Recv == nil || !fd.Name.IsExported() {
			continue
		}
		n++
		var first strings.Builder
		if len(fd.Body.List) > 0 {
			printer.Fprint(&first, token.NewFileSet(), fd.Body.List[0])
		}
		want := `m.lock("` + fd.Name.Name + `")`
		if fd.Name.Name == "Session" {
			want = "if m == nil"
		}
		if !strings.Contains(first.String(), want) {
			t.Errorf("%s starts with %q, not a test of %s", fd.Name.Name, first.String(), want)
		}
	}
	if n < 15 {
		t.Fatalf("%d methods", n)
	}
}
