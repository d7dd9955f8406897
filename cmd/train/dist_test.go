package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime/data"
)

// TestMain runs main itself when $NGEN_TRAIN_MAIN is set, so that the
// -dist test can start this binary under mpirun as the training command.
func TestMain(m *testing.M) {
	if os.Getenv("NGEN_TRAIN_MAIN") != "" {
		main()
		os.Exit(0)
	}
	if path := os.Getenv(saveEnv); path != "" { // TestSaveKilledTrain's writer
		if err := saveWriter(path); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// writeIDX writes an unsigned-byte IDX file.
func writeIDX(t *testing.T, path string, dims []int, vals []byte) {
	var b bytes.Buffer
	b.Write([]byte{0, 0, 0x08, byte(len(dims))})
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, uint32(d))
	}
	b.Write(vals)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// smallFashionMNIST writes the first n training and m test images of
// Fashion-MNIST to a directory, so that an epoch takes a moment.
func smallFashionMNIST(t *testing.T, n, m int) string {
	dir := t.TempDir()
	for _, part := range []struct {
		train  bool
		prefix string
		n      int
	}{{true, "train", n}, {false, "t10k", m}} {
		ds, err := data.LoadFashionMNIST(data.DefaultFashionMNISTDir, part.train)
		if err != nil {
			t.Fatal(err)
		}
		px := make([]byte, part.n*784)
		for i := range px {
			px[i] = byte(math.Round(float64(ds.X[i]) * 255))
		}
		lb := make([]byte, part.n)
		for i := range lb {
			lb[i] = byte(ds.Y[i])
		}
		writeIDX(t, filepath.Join(dir, part.prefix+"-images-idx3-ubyte"), []int{part.n, 28, 28}, px)
		writeIDX(t, filepath.Join(dir, part.prefix+"-labels-idx1-ubyte"), []int{part.n}, lb)
	}
	return dir
}

var epochLine = regexp.MustCompile(`epoch 1: train loss ([0-9.]+), test accuracy ([0-9.]+)%`)

// TestDistTrain: `mpirun -np 2 train -dist mpi -batch 32` prints one
// epoch line (rank 0 alone prints), and its loss (summed over the ranks)
// and test accuracy (evaluated on shards, counts summed) are those of one
// process with -batch 64 on the same data and seed.
func TestDistTrain(t *testing.T) {
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Fatalf("mpirun not on PATH (scripts/setup.sh installs openmpi-bin): %v", err)
	}
	dir := smallFashionMNIST(t, 640, 300)
	args := []string{"-model", "mlp", "-epochs", "1", "-threads", "1", "-quiet", "-data", dir}
	run := func(name string, a ...string) []string {
		cmd := exec.Command(name, a...)
		cmd.Env = append(os.Environ(), "NGEN_TRAIN_MAIN=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(a, " "), err, out)
		}
		m := epochLine.FindAllStringSubmatch(string(out), -1)
		if len(m) != 1 {
			t.Fatalf("%s: want one epoch line, got %d:\n%s", name, len(m), out)
		}
		return m[0][1:]
	}
	one := run(os.Args[0], append(args, "-batch", "64")...)
	two := run("mpirun", append([]string{"--oversubscribe", "--allow-run-as-root", "-np", "2", "-x", "NGEN_TRAIN_MAIN",
		os.Args[0], "-dist", "mpi", "-batch", "32"}, args...)...)
	l1, _ := strconv.ParseFloat(one[0], 64)
	l2, _ := strconv.ParseFloat(two[0], 64)
	// The same batches and dropout masks, summed in another order: the
	// printed 4 decimals agree to a unit or so; test accuracy to one
	// image of 300 (a logit within rounding of another's).
	if math.Abs(l1-l2) > 2e-4 {
		t.Errorf("train loss %s with 2 processes of batch 32, %s with one of batch 64", two[0], one[0])
	}
	a1, _ := strconv.ParseFloat(one[1], 64)
	a2, _ := strconv.ParseFloat(two[1], 64)
	if math.Abs(a1-a2) > 100.0/300+1e-9 {
		t.Errorf("test accuracy %s%% with 2 processes, %s%% with one", two[1], one[1])
	}
	t.Logf("one process: loss %s, accuracy %s%%; two: loss %s, accuracy %s%%", one[0], one[1], two[0], two[1])
}
