package data

import (
	"bytes"
	"strings"
	"testing"
)

// idxSeeds are the fuzz seed corpus: valid files and issue 13's header
// whose dimensions overflow (16 bytes, dims 0xFFFFFFFF × 0xFFFFFFFF, which
// panicked).
var idxSeeds = [][]byte{
	encodeIDX(0x08, []int{3}, []byte{1, 2, 3}),
	encodeIDX(0x08, []int{2, 2}, []byte{1, 2, 3, 4}),
	encodeIDX(0x08, []int{0xFFFFFFFF, 0xFFFFFFFF}, nil),
	encodeIDX(0x08, []int{0x10000, 0x10000, 0x10000}, nil),
	encodeIDX(0x08, []int{0, 0xFFFFFFFF}, nil),
	encodeIDX(0x08, []int{1 << 16, 1 << 16}, []byte{1}),
	{0, 0, 8, 0},
}

func TestIDXOverflowingDims(t *testing.T) {
	b := idxSeeds[2]
	if len(b) != 12 {
		t.Fatalf("seed is %d bytes", len(b))
	}
	_, err := decodeIDX(bytes.NewReader(append(b, 0, 0, 0, 0)))
	if err == nil || !strings.Contains(err.Error(), "claim more than") {
		t.Fatalf("dims 0xFFFFFFFF×0xFFFFFFFF: %v", err)
	}
	// 2^32 elements claimed, one byte present: an error, no 4 GB buffer.
	if _, err := decodeIDX(bytes.NewReader(idxSeeds[5])); err == nil || !strings.Contains(err.Error(), "got 1") {
		t.Fatalf("short body: %v", err)
	}
}

// FuzzDecodeIDX: any bytes give an error or an IDX whose data matches its
// dimensions; never a panic.
func FuzzDecodeIDX(f *testing.F) {
	for _, s := range idxSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		idx, err := decodeIDX(bytes.NewReader(b))
		if err != nil {
			return
		}
		n := 1
		for _, d := range idx.Dims {
			n *= d
		}
		if n != len(idx.Data) {
			t.Fatalf("dims %v but %d bytes", idx.Dims, len(idx.Data))
		}
	})
}
