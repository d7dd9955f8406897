package data

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// DefaultFashionMNISTDir is where Debian's dataset-fashion-mnist package puts
// the files; scripts/setup.sh installs it.
const DefaultFashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// Dataset is a labelled set of N samples with Features float32 features each.
// X is [N, Features] row-major; Y holds one class index per sample.
type Dataset struct {
	X        []float32
	Y        []int32
	N        int
	Features int
}

// LoadFashionMNIST reads the training set (60000 samples) or the test set
// (10000) from dir. Pixels are scaled to [0,1] and flattened to 784 features,
// as torchvision's ToTensor does.
func LoadFashionMNIST(dir string, train bool) (*Dataset, error) {
	prefix := "t10k"
	if train {
		prefix = "train"
	}
	images, err := readIDXFile(dir, prefix+"-images-idx3-ubyte")
	if err != nil {
		return nil, err
	}
	labels, err := readIDXFile(dir, prefix+"-labels-idx1-ubyte")
	if err != nil {
		return nil, err
	}
	if len(images.Dims) != 3 || len(labels.Dims) != 1 || images.Dims[0] != labels.Dims[0] {
		return nil, fmt.Errorf("fashion-mnist in %s: images %v and labels %v do not match", dir, images.Dims, labels.Dims)
	}
	// Any other image size or an empty set reads as valid IDX but is not
	// Fashion-MNIST: 27×28 images fed the 784-wide models rows that
	// straddle two samples, and no samples trained nothing without a word.
	if images.Dims[1] != 28 || images.Dims[2] != 28 || images.Dims[0] == 0 {
		return nil, fmt.Errorf("fashion-mnist in %s: images %v: want one or more 28×28 images", dir, images.Dims)
	}
	n, feat := images.Dims[0], images.Dims[1]*images.Dims[2]
	ds := &Dataset{X: make([]float32, n*feat), Y: make([]int32, n), N: n, Features: feat}
	for i, p := range images.Data {
		ds.X[i] = float32(p) / 255
	}
	for i, l := range labels.Data {
		if l > 9 {
			return nil, fmt.Errorf("fashion-mnist in %s: label %d of sample %d is not a class 0..9", dir, l, i)
		}
		ds.Y[i] = int32(l)
	}
	return ds, nil
}

// readIDXFile reads name.gz, or name when only the uncompressed file exists.
func readIDXFile(dir, name string) (*IDX, error) {
	path := filepath.Join(dir, name+".gz")
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			path = filepath.Join(dir, name)
		} else {
			return nil, fmt.Errorf("fashion-mnist: %s not found in %s; install Debian's dataset-fashion-mnist (bash scripts/setup.sh train does)", name+".gz", dir)
		}
	}
	return ReadIDX(path)
}
