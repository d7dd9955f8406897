package fuzzgen

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/ngen-ml/ngen/compiler/oracle"
	"github.com/ngen-ml/ngen/dsl"
)

// regression is a model TestFuzz found failing, shrunk: its DSL source
// (model) and its spec as JSON. Each lives in a regress_*_test.go file
// that RegressionTest wrote.
type regression struct {
	name  string
	model func() *dsl.Model
	spec  string
}

var regressions []regression

// positions matches the "  # file:line" of the IR's text form.
var positions = regexp.MustCompile(`  # \S+`)

// TestRegressions checks every regression model: its DSL source declares
// the same IR as its spec, and Check passes on it (without -short).
func TestRegressions(t *testing.T) {
	for _, r := range regressions {
		t.Run(r.name, func(t *testing.T) {
			var s Spec
			if err := json.Unmarshal([]byte(r.spec), &s); err != nil {
				t.Fatal(err)
			}
			if err := s.Infer(); err != nil {
				t.Fatal(err)
			}
			sameModel(t, r.name, &s, r.model)
			if testing.Short() {
				return
			}
			if err := oracle.Available(); err != nil {
				t.Skip(err)
			}
			fails, _, err := Check([]*Spec{&s}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range fails {
				t.Error(f)
			}
		})
	}
}
