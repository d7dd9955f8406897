package codegen

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/compiler"
	"github.com/ngen-ml/ngen/compiler/ir"
	"github.com/ngen-ml/ngen/compiler/irtest"
)

func TestReport(t *testing.T) {
	p, err := compiler.Compile(irtest.MLP(ir.F32, 7, 9, 4, 0.2, irtest.Adam), compiler.Options{Fuse: true, RefBatch: 32})
	if err != nil {
		t.Fatal(err)
	}
	r, err := MakeReport(p)
	if err != nil {
		t.Fatal(err)
	}
	launches, gemms := 0, 0
	var bytesSum, flops int64
	for _, s := range r.Steps {
		switch s.Kind {
		case "launch":
			launches++
			if s.Kernel == "" {
				t.Errorf("launch without a kernel name: %+v", s)
			}
		case "gemm":
			gemms++
		}
		bytesSum += s.Bytes
		flops += s.Flops
	}
	if r.Kernels != launches || r.Gemms != gemms || r.Bytes != bytesSum || r.Flops != flops || r.Batch != 32 {
		t.Fatalf("summary %+v disagrees with its rows (%d launches, %d gemms, %d bytes, %d flops)", r, launches, gemms, bytesSum, flops)
	}
	// Two Linear layers: 2 forward GEMMs, and per layer a weight-gradient
	// GEMM plus an input-gradient GEMM except for the first layer.
	if r.Gemms != 5 || r.Kernels == 0 || r.PeakBytes != p.PeakBytes || r.PeakBytes <= 0 {
		t.Fatalf("report %+v", r)
	}
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(buf.Bytes(), &obj); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"kernels", "gemms", "bytes", "flops", "peak_bytes", "steps"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("JSON report lacks %q", k)
		}
	}
	buf.Reset()
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "kernels per step: ") || !strings.Contains(buf.String(), "planned peak memory: ") {
		t.Fatalf("text report:\n%s", buf.String())
	}
}
