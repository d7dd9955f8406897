package data

import (
	"strings"
	"testing"
)

// TestLoadFashionMNISTShape: the second adversarial pass loaded 27×28
// images and an empty set without an error.
func TestLoadFashionMNISTShape(t *testing.T) {
	for _, dims := range [][]int{{3, 27, 28}, {3, 28, 29}, {0, 28, 28}} {
		dir := t.TempDir()
		n := dims[0]
		writeFile(t, dir, "train-images-idx3-ubyte", encodeIDX(0x08, dims, make([]byte, dims[0]*dims[1]*dims[2])))
		writeFile(t, dir, "train-labels-idx1-ubyte", encodeIDX(0x08, []int{n}, make([]byte, n)))
		if _, err := LoadFashionMNIST(dir, true); err == nil || !strings.Contains(err.Error(), "want one or more 28×28 images") {
			t.Errorf("images %v: err = %v", dims, err)
		}
	}
}
