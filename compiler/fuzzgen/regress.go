package fuzzgen

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
)

// RegressionTest renders a Go test file for the (shrunk) spec s that
// failed with fails: its DSL source as a function, the spec as JSON, and
// a registration with TestRegressions, which checks that the source
// declares the spec's model and that Check passes on it. The file is
// written into compiler/fuzzgen with the fix that makes it pass.
func RegressionTest(s *Spec, fails []Failure) string {
	fn := "model" + camel(s.Name)
	js, _ := json.MarshalIndent(s, "", "  ")
	var b strings.Builder
	b.WriteString("package fuzzgen\n\n")
	b.WriteString("// A model TestFuzz found, shrunk. It failed with:\n")
	for _, f := range fails {
		for _, line := range strings.Split(f.String(), "\n") {
			fmt.Fprintf(&b, "//\t%s\n", line)
		}
	}
	b.WriteString("\nimport \"github.com/ngen-ml/ngen/dsl\"\n\n")
	fmt.Fprintf(&b, "func init() {\n\tregressions = append(regressions, regression{name: %q, model: %s, spec: `%s`})\n}\n\n", s.Name, fn, js)
	b.WriteString(s.Source(fn))
	return b.String()
}

// camel turns a spec name (fuzz_123_min) into an identifier part
// (Fuzz123Min).
func camel(name string) string {
	var b strings.Builder
	up := true
	for _, r := range name {
		if r == '_' || !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			up = true
			continue
		}
		if up {
			r = unicode.ToUpper(r)
			up = false
		}
		b.WriteRune(r)
	}
	return b.String()
}
