package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// encodeIDX returns the plain IDX encoding of bytes with element type typ.
func encodeIDX(typ byte, dims []int, data []byte) []byte {
	var b bytes.Buffer
	b.Write([]byte{0, 0, typ, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, uint32(d))
	}
	b.Write(data)
	return b.Bytes()
}

func gzipBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadIDXPlainAndGzip(t *testing.T) {
	dims := []int{2, 3, 4}
	data := make([]byte, 24)
	for i := range data {
		data[i] = byte(i * 7)
	}
	plain := encodeIDX(0x08, dims, data)
	dir := t.TempDir()
	// The gzip file deliberately has no .gz suffix: the magic decides.
	for name, b := range map[string][]byte{"plain.idx": plain, "zipped.idx": gzipBytes(t, plain)} {
		idx, err := ReadIDX(writeFile(t, dir, name, b))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(idx.Dims, dims) || !bytes.Equal(idx.Data, data) {
			t.Errorf("%s: got dims %v data %v, want %v %v", name, idx.Dims, idx.Data, dims, data)
		}
	}
}

func TestReadIDXErrors(t *testing.T) {
	dir := t.TempDir()
	good := encodeIDX(0x08, []int{3}, []byte{1, 2, 3})
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"float", encodeIDX(0x0D, []int{1}, make([]byte, 4)), "float32 (0x0d) is not supported"},
		{"badtype", encodeIDX(0x42, []int{1}, []byte{0}), "unknown element type 0x42"},
		{"magic", []byte("PK\x03\x04zipfile"), "not an IDX file"},
		{"short", good[:len(good)-1], "want 3 bytes"},
		{"long", append(slices.Clone(good), 9), "1 bytes after"},
		{"header", good[:2], "header"},
	} {
		_, err := ReadIDX(writeFile(t, dir, tc.name, tc.b))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func TestLoadFashionMNISTTiny(t *testing.T) {
	dir := t.TempDir()
	const n = 3
	img := make([]byte, n*28*28)
	for i := range img {
		img[i] = byte(i % 256)
	}
	writeFile(t, dir, "t10k-images-idx3-ubyte.gz", gzipBytes(t, encodeIDX(0x08, []int{n, 28, 28}, img)))
	// Labels uncompressed, to cover the fallback to the plain name.
	writeFile(t, dir, "t10k-labels-idx1-ubyte", encodeIDX(0x08, []int{n}, []byte{9, 0, 4}))

	ds, err := LoadFashionMNIST(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if ds.N != n || ds.Features != 784 || len(ds.X) != n*784 || !slices.Equal(ds.Y, []int32{9, 0, 4}) {
		t.Fatalf("got N=%d Features=%d len(X)=%d Y=%v", ds.N, ds.Features, len(ds.X), ds.Y)
	}
	if ds.X[255] != 1 || ds.X[256] != 0 || ds.X[1] != float32(1)/255 {
		t.Errorf("pixels not scaled to [0,1]: X[1]=%v X[255]=%v X[256]=%v", ds.X[1], ds.X[255], ds.X[256])
	}

	_, err = LoadFashionMNIST(dir, true)
	if err == nil || !strings.Contains(err.Error(), "setup") {
		t.Errorf("missing train set: got %v, want an error pointing at the setup command", err)
	}
}

func TestLoadFashionMNISTInstalled(t *testing.T) {
	if testing.Short() {
		t.Skip("reads 30 MB")
	}
	if _, err := os.Stat(DefaultFashionMNISTDir); err != nil {
		t.Skipf("dataset not installed: %v", err)
	}
	ds, err := LoadFashionMNIST(DefaultFashionMNISTDir, false)
	if err != nil {
		t.Fatal(err)
	}
	if ds.N != 10000 || ds.Features != 784 {
		t.Fatalf("test set: N=%d Features=%d, want 10000 784", ds.N, ds.Features)
	}
	counts := make([]int, 10)
	for _, y := range ds.Y {
		counts[y]++
	}
	for c, k := range counts {
		if k != 1000 {
			t.Errorf("class %d has %d test samples, want 1000", c, k)
		}
	}
}
