package convnet_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ngen-ml/ngen/generated/convnet_bn"
	"github.com/ngen-ml/ngen/runtime/cpu"
	"github.com/ngen-ml/ngen/runtime/safetensors"
)

func writeF32(t *testing.T, path string, v []float32) {
	t.Helper()
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readF32s(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// TestBatchNormCheckpointInterop: checkpoints with batch norm cross
// between PyTorch and ngen under state_dict names (bn1.running_mean, ...):
// PyTorch's trained ConvNet loads into ngen with its running statistics
// (num_batches_tracked skipped) and gives PyTorch's eval logits, and
// ngen's loads into PyTorch strictly and gives ngen's.
func TestBatchNormCheckpointInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs PyTorch")
	}
	dir := t.TempDir()
	const B = 4
	x, y := batch(B, 5)
	writeF32(t, filepath.Join(dir, "img.bin"), x)
	yb := make([]byte, 4*B)
	for i, v := range y {
		binary.LittleEndian.PutUint32(yb[4*i:], uint32(v))
	}
	os.WriteFile(filepath.Join(dir, "y.bin"), yb, 0o644)
	script := filepath.Join("..", "..", "testdata", "oracle", "ckpt_interop.py")
	py := func(mode string) {
		t.Helper()
		if out, err := exec.Command("/usr/bin/python3", script, mode, dir).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
	}
	dev, err := cpu.New(cpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()

	py("bn_torch2ngen")
	m, err := convnet_bn.New(dev, convnet_bn.Options{Batch: B, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ck, _ := os.ReadFile(filepath.Join(dir, "bn_torch.safetensors"))
	if f, err := safetensors.Parse(ck); err != nil {
		t.Fatal(err)
	} else if _, ok := f.Lookup("bn1.num_batches_tracked"); !ok {
		t.Fatal("PyTorch's file lacks bn1.num_batches_tracked: the skip is untested")
	}
	if err := m.Load(bytes.NewReader(ck)); err != nil {
		t.Fatal(err)
	}
	m.Eval()
	got, err := m.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	want := readF32s(t, filepath.Join(dir, "bn_torch_logits.bin"))
	for i := range want {
		// f32 convolutions summed in another order.
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-5+1e-4*math.Abs(float64(want[i])) {
			t.Fatalf("logit %d: ngen %v, PyTorch %v", i, got[i], want[i])
		}
	}

	n, err := convnet_bn.New(dev, convnet_bn.Options{Batch: B, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for i := 0; i < 2; i++ {
		if _, err := n.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := n.Save(&buf); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "bn_ngen.safetensors"), buf.Bytes(), 0o644)
	n.Eval()
	l, err := n.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	writeF32(t, filepath.Join(dir, "bn_ngen_logits.bin"), l)
	py("bn_ngen2torch")
}
