package main

import (
	"strings"
	"testing"
)

// TestBatchFlag: -batch 0 and -batch -7 built and printed "planned peak …
// at batch -7" (the compiler silently used 128); now both commands refuse.
func TestBatchFlag(t *testing.T) {
	for _, cmd := range []func([]string) error{build, report} {
		for _, b := range []string{"0", "-7"} {
			err := cmd([]string{"-batch", b, "model.go"})
			if err == nil || !strings.Contains(err.Error(), "-batch "+b+": want a positive batch size") {
				t.Errorf("-batch %s: err = %v", b, err)
			}
		}
	}
}
