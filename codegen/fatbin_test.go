package codegen

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ngen-ml/ngen/runtime"
)

// TestCommittedFatbins: every generated package's committed fatbin is
// gzip-compressed (FatbinFile), decompresses (runtime.Module.FatbinImage,
// as the GPU backend does) to an NVIDIA fatbin (magic 0xBA55ED50), and
// compresses back to the same bytes (GzipFatbin is deterministic, so
// regenerating without nvcc leaves generated/ unchanged).
func TestCommittedFatbins(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "generated", "*", "*.fatbin.gz"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no committed fatbins (%v)", err)
	}
	if raw, _ := filepath.Glob(filepath.Join("..", "generated", "*", "*.fatbin")); len(raw) > 0 {
		t.Errorf("uncompressed fatbins committed: %v", raw)
	}
	for _, f := range files {
		gz, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		img, err := (&runtime.Module{Name: f, FatbinGz: gz}).FatbinImage()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !bytes.HasPrefix(img, []byte{0x50, 0xed, 0x55, 0xba}) {
			t.Fatalf("%s: not a fatbin (starts % x)", f, img[:min(len(img), 8)])
		}
		if testing.Short() {
			continue // compressing 36 MB again takes seconds
		}
		again, err := GzipFatbin(img)
		if err != nil || !bytes.Equal(again, gz) {
			t.Fatalf("%s: compressing its fatbin again gives other bytes (%v)", f, err)
		}
	}
}
