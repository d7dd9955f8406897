package mlp_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime/safetensors"
)

// TestCheckpointAdamBound: a checkpoint whose Adam exp_avg is finite but
// huge (3e38) loaded, and the next step, whose gradients the guard found
// finite, made parameters non-finite. Load now holds Adam's moments to a
// bound every run satisfies (runtime/checkpoint_adam.go): the file is
// rejected naming the tensor and the model stays bit for bit as it was,
// while the state of 20 real steps, some with gradients a million times
// the usual, loads.
func TestCheckpointAdamBound(t *testing.T) {
	dev := device(t)
	a, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	for i := 0; i < 20; i++ {
		x, y := batch(8, uint64(i%3))
		scale := float32([]float64{1, 1e3, 1e6, 1}[i%4])
		for j := range x {
			x[j] *= scale
		}
		if _, err := a.Step(x, y); err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
	}
	var buf bytes.Buffer
	if err := a.Save(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	b, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Load(bytes.NewReader(good)); err != nil {
		t.Fatalf("the state of 20 real steps: %v", err)
	}
	same(t, "after loading real state", snap(t, b.Session()), snap(t, a.Session()))

	f, err := safetensors.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	meta := map[string]string{}
	for k, v := range f.Metadata {
		meta[k] = v
	}
	var ts []safetensors.Tensor
	for _, x := range f.Tensors {
		x.Data = bytes.Clone(x.Data)
		if x.Name == "__optimizer__.fc2.weight.exp_avg" {
			binary.LittleEndian.PutUint32(x.Data[4*77:], math.Float32bits(3e38))
		}
		ts = append(ts, x)
	}
	bad := sign(t, meta, ts)
	c, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := snap(t, c.Session())
	err = c.Load(bytes.NewReader(bad))
	if err == nil || !strings.Contains(err.Error(), `"__optimizer__.fc2.weight.exp_avg"`) || !strings.Contains(err.Error(), "element 77") {
		t.Fatalf("exp_avg 3e38: err = %v", err)
	}
	same(t, "after the rejected load", snap(t, c.Session()), before)
}
