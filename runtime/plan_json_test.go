package runtime_test

import (
	"os"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

// TestDecodePlanRefuses: plans that ngen never writes are refused with a
// reason, not loaded.
func TestDecodePlanRefuses(t *testing.T) {
	good, err := os.ReadFile("../generated/mlp/plan.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runtime.DecodePlan(good); err != nil {
		t.Fatalf("generated/mlp/plan.json: %v", err)
	}
	for _, c := range []struct{ plan, want string }{
		{``, "decoding a plan"},
		{`{}`, "no model name or no functions"},
		{`null`, "no model name or no functions"},
		{`{"Model":"m","Funcs":[{"Name":"step"}],"Buffers":[{"Name":"w","Elems":{"Mul":-5}}]}`, "has -5 elements"},
		{`{"Model":"m","Funcs":[{"Name":"step"}],"Buffers":[{"Name":"w","Elems":{"Mul":5,"Syms":["T"]}}],"Symbols":["B"]}`, `symbol "T"`},
		{`{"Model":"m","Funcs":[{"Name":"step"}],"Buffers":[{"Name":"w","AliasOf":7}]}`, "is not an alias"},
		{`{"Model":"m","Funcs":[{"Name":"step","Steps":[{"Kernel":99}]}]}`, "launches kernel 99 of 0"},
		{`{"Model":"m","Funcs":[{"Name":"step","Inputs":[{"Name":"x","Buf":3}]}]}`, "names buffer 3 of 0"},
	} {
		_, err := runtime.DecodePlan([]byte(c.plan))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("DecodePlan(%s): %v, want an error saying %q", c.plan, err, c.want)
		}
	}
}

// FuzzDecodePlan: no bytes make DecodePlan panic.
func FuzzDecodePlan(f *testing.F) {
	good, err := os.ReadFile("../generated/mlp/plan.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"Model":"m","Funcs":[{"Name":"step","Steps":[{"Kind":1}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, err := runtime.DecodePlan(b); err == nil && p == nil {
			t.Fatal("nil plan without an error")
		}
	})
}
