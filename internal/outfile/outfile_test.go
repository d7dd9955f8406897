package outfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck: a wrong extension, a missing directory and a directory as
// the target are refused, naming the flag; a good name passes and leaves
// nothing behind.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ path, want string }{
		{filepath.Join(dir, "run.jpg"), `unknown extension ".jpg"`},
		{filepath.Join(dir, "no", "such", "run.png"), "cannot write there"},
		{dir + "/sub.png", "not a regular file"},
		{"", "empty file name"},
	} {
		if c.path == dir+"/sub.png" {
			if err := os.Mkdir(c.path, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		err := Check("-plot", c.path, ".png", ".svg")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "-plot") {
			t.Errorf("Check(%q) = %v, want an error with %q", c.path, err, c.want)
		}
	}
	good := filepath.Join(dir, "Run.PNG")
	if err := Check("-plot", good, ".png", ".svg"); err != nil {
		t.Fatal(err)
	}
	if err := Write(good, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := Write(good, []byte("yz")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(good); err != nil || string(b) != "yz" {
		t.Fatalf("read back %q, %v", b, err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 { // sub.png and Run.PNG
		t.Fatalf("left in the directory: %v", ents)
	}
}
