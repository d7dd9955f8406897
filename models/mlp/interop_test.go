package mlp_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlpbench"
	"github.com/ngen-ml/ngen/runtime/safetensors"
)

// TestTorchCheckpointInterop: a checkpoint crosses between PyTorch and
// ngen both ways (testdata/oracle/ckpt_interop.py, stdlib and numpy):
// PyTorch trains two Adam steps, ngen loads its state_dict and Adam state,
// reproduces its logits and takes the third step as PyTorch does; and
// ngen's checkpoint loads into PyTorch, which reproduces ngen's logits and
// continues training as ngen does.
func TestTorchCheckpointInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("runs PyTorch")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	dir := t.TempDir()
	const B, in = 16, 1024
	x, y := make([]float32, B*in), make([]int32, B)
	xb, yb := make([]byte, 4*len(x)), make([]byte, 4*len(y))
	for i := range x {
		x[i] = float32(math.Sin(float64(i)*0.37)) * 0.8
		binary.LittleEndian.PutUint32(xb[4*i:], math.Float32bits(x[i]))
	}
	for i := range y {
		y[i] = int32(i*7) % 10
		binary.LittleEndian.PutUint32(yb[4*i:], uint32(y[i]))
	}
	os.WriteFile(filepath.Join(dir, "x.bin"), xb, 0o644)
	os.WriteFile(filepath.Join(dir, "y.bin"), yb, 0o644)
	script := filepath.Join("..", "..", "testdata", "oracle", "ckpt_interop.py")
	py := func(mode string) {
		t.Helper()
		out, err := exec.Command("/usr/bin/python3", script, mode, dir).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", mode, err, out)
		}
	}
	params := func(m *mlpbench.Model) map[string][]float32 {
		out := map[string][]float32{}
		for _, n := range m.Params() {
			v, err := m.Param(n)
			if err != nil {
				t.Fatal(err)
			}
			out[n] = v
		}
		return out
	}
	dev := device(t)

	// PyTorch → ngen.
	py("torch2ngen")
	m, err := mlpbench.New(dev, mlpbench.Options{Batch: B, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ck, err := os.ReadFile(filepath.Join(dir, "torch.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(bytes.NewReader(ck)); err != nil {
		t.Fatal(err)
	}
	if m.Session().Steps() != 2 {
		t.Fatalf("step count %d after loading PyTorch's, want 2", m.Session().Steps())
	}
	m.Eval()
	logits, err := m.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	want := readF32(t, filepath.Join(dir, "torch_logits.bin"))
	for i := range want {
		// f32 GEMMs summed in another order.
		if d := math.Abs(float64(logits[i] - want[i])); d > 1e-5+1e-4*math.Abs(float64(want[i])) {
			t.Fatalf("logit %d: ngen %v, PyTorch %v", i, logits[i], want[i])
		}
	}
	m.Train()
	if _, err := m.Step(x, y); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(filepath.Join(dir, "torch_after.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := safetensors.Parse(after)
	if err != nil {
		t.Fatal(err)
	}
	for n, v := range params(m) {
		tt, ok := f.Lookup(n)
		if !ok {
			t.Fatalf("PyTorch's checkpoint lacks %s", n)
		}
		for i := range v {
			w := math.Float32frombits(binary.LittleEndian.Uint32(tt.Data[4*i:]))
			// One Adam step moves a weight by about lr = 1e-3.
			if d := math.Abs(float64(v[i] - w)); d > 1e-6+1e-5*math.Abs(float64(w)) {
				t.Fatalf("%s[%d] after the continued step: ngen %v, PyTorch %v", n, i, v[i], w)
			}
		}
	}

	// ngen → PyTorch.
	n, err := mlpbench.New(dev, mlpbench.Options{Batch: B, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for i := 0; i < 2; i++ { // ngen's own initialisation and training
		if _, err := n.Step(x, y); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := n.Save(&buf); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "ngen.safetensors"), buf.Bytes(), 0o644)
	n.Eval()
	l, err := n.Predict(x)
	if err != nil {
		t.Fatal(err)
	}
	lb := make([]byte, 4*len(l))
	for i, v := range l {
		binary.LittleEndian.PutUint32(lb[4*i:], math.Float32bits(v))
	}
	os.WriteFile(filepath.Join(dir, "ngen_logits.bin"), lb, 0o644)
	n.Train()
	if _, err := n.Step(x, y); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := n.Save(&buf); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "ngen_after.safetensors"), buf.Bytes(), 0o644)
	py("ngen2torch")
}

func readF32(t *testing.T, path string) []float32 {
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
