package mlp_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/generated/mlp"
	"github.com/ngen-ml/ngen/runtime/safetensors"
)

// sign recomputes ngen.sha256 over a file whose metadata holds it, so a
// test can hand Load a deliberately wrong file that is not merely corrupt.
func sign(t *testing.T, meta map[string]string, ts []safetensors.Tensor) []byte {
	t.Helper()
	meta["ngen.sha256"] = strings.Repeat("0", 64)
	b, err := safetensors.Encode(meta, ts)
	if err != nil {
		t.Fatal(err)
	}
	field := []byte(`"ngen.sha256":"` + strings.Repeat("0", 64))
	at := bytes.Index(b, field) + len(field) - 64
	sum := sha256.Sum256(b)
	copy(b[at:], hex.EncodeToString(sum[:]))
	return b
}

// TestCheckpointRejects: issue 13's checkpoint cases. Each load fails with
// an error naming what is wrong and leaves the model untouched.
func TestCheckpointRejects(t *testing.T) {
	dev := device(t)
	a, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	x, y := batch(8, 3)
	if _, err := a.Step(x, y); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := a.Save(&buf); err != nil {
		t.Fatal(err)
	}
	good := buf.Bytes()
	f, err := safetensors.Parse(good)
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := f.Lookup("fc1.weight"); !ok || w.DType != "F32" || len(w.Shape) != 2 || w.Shape[0] != 512 || w.Shape[1] != 784 {
		t.Fatalf("fc1.weight: %+v", w)
	}
	if _, ok := f.Lookup("__optimizer__.fc1.weight.exp_avg_sq"); !ok || f.Metadata["ngen.step"] != "1" {
		t.Fatalf("optimizer state or step missing: %v", f.Metadata)
	}
	b, err := mlp.New(dev, mlp.Options{Batch: 8, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	before := snap(t, b.Session())
	load := func(what string, file []byte, want string) {
		t.Helper()
		err := b.Load(bytes.NewReader(file))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: err = %v, want it to mention %q", what, err, want)
		}
		same(t, what, snap(t, b.Session()), before)
	}
	edit := func(fn func(meta map[string]string, ts []safetensors.Tensor) []safetensors.Tensor) []byte {
		meta := map[string]string{}
		for k, v := range f.Metadata {
			meta[k] = v
		}
		ts := make([]safetensors.Tensor, len(f.Tensors))
		for i, x := range f.Tensors {
			x.Data = bytes.Clone(x.Data)
			x.Shape = append([]int64(nil), x.Shape...)
			ts[i] = x
		}
		return sign(t, meta, fn(meta, ts))
	}
	find := func(ts []safetensors.Tensor, name string) *safetensors.Tensor {
		for i := range ts {
			if ts[i].Name == name {
				return &ts[i]
			}
		}
		t.Fatalf("no %s", name)
		return nil
	}
	load("truncated", good[:len(good)/2], "checkpoint")
	load("trailing bytes", append(bytes.Clone(good), 0), "trailing")
	load("same element count, other shape", edit(func(_ map[string]string, ts []safetensors.Tensor) []safetensors.Tensor {
		find(ts, "fc1.weight").Shape = []int64{784, 512}
		return ts
	}), `"fc1.weight" is F32[784 512], the model's is F32[512 784]`)
	load("other dtype", edit(func(_ map[string]string, ts []safetensors.Tensor) []safetensors.Tensor {
		w := find(ts, "fc3.bias")
		w.DType, w.Data = "F64", make([]byte, 80)
		return ts
	}), `"fc3.bias" is F64`)
	load("NaN in a parameter", edit(func(_ map[string]string, ts []safetensors.Tensor) []safetensors.Tensor {
		binary.LittleEndian.PutUint32(find(ts, "fc2.bias").Data[12:], math.Float32bits(float32(math.NaN())))
		return ts
	}), `"fc2.bias" has a non-finite value at element 3`)
	load("Inf in optimizer state", edit(func(_ map[string]string, ts []safetensors.Tensor) []safetensors.Tensor {
		binary.LittleEndian.PutUint32(find(ts, "__optimizer__.fc2.bias.exp_avg").Data, math.Float32bits(float32(math.Inf(1))))
		return ts
	}), `"__optimizer__.fc2.bias.exp_avg" has a non-finite value`)
	load("missing parameter", edit(func(_ map[string]string, ts []safetensors.Tensor) []safetensors.Tensor {
		return ts[1:]
	}), `lacks tensor "fc1.weight"`)
	load("unknown tensor", edit(func(_ map[string]string, ts []safetensors.Tensor) []safetensors.Tensor {
		return append(ts, safetensors.Tensor{Name: "fc9.weight", DType: "F32", Shape: []int64{1}, Data: make([]byte, 4)})
	}), `"fc9.weight", which this model lacks`)
	load("NaN learning rate", edit(func(meta map[string]string, ts []safetensors.Tensor) []safetensors.Tensor {
		meta["ngen.lr"] = "NaN"
		return ts
	}), "ngen.lr")
	load("step 2^64-1", edit(func(meta map[string]string, ts []safetensors.Tensor) []safetensors.Tensor {
		meta["ngen.step"] = "18446744073709551615"
		return ts
	}), "ngen.step")
	// The second adversarial pass: finite values that no training writes,
	// each of which loaded and turned every weight non-finite on the next
	// step that reported success.
	load("rate beyond float32", edit(func(meta map[string]string, ts []safetensors.Tensor) []safetensors.Tensor {
		meta["ngen.lr"] = "1e39"
		return ts
	}), "ngen.lr")
	load("negative exp_avg_sq", edit(func(_ map[string]string, ts []safetensors.Tensor) []safetensors.Tensor {
		binary.LittleEndian.PutUint32(find(ts, "__optimizer__.fc2.bias.exp_avg_sq").Data[8:], math.Float32bits(-1))
		return ts
	}), `"__optimizer__.fc2.bias.exp_avg_sq" has a negative value at element 2`)
	load("num_batches_tracked that is not PyTorch's counter", edit(func(_ map[string]string, ts []safetensors.Tensor) []safetensors.Tensor {
		return append(ts, safetensors.Tensor{Name: "fc1.num_batches_tracked", DType: "F32", Shape: []int64{1000}, Data: make([]byte, 4000)})
	}), `"fc1.num_batches_tracked", which this model lacks`)
	noSum, err := safetensors.Encode(map[string]string{"format": "pt"}, f.Tensors)
	if err != nil {
		t.Fatal(err)
	}
	load("no checksum", noSum, "ngen.sha256")
	// Byte flips: every one is caught (1,640 of 1,823 loaded before), in
	// the length word, the header and the data.
	rng := rand.New(rand.NewPCG(1, 2))
	hl := int(binary.LittleEndian.Uint64(good))
	for k := 0; k < 120; k++ {
		var at int
		switch {
		case k < 8:
			at = k
		case k < 70:
			at = 8 + rng.IntN(hl)
		default:
			at = 8 + hl + rng.IntN(len(good)-8-hl)
		}
		c := bytes.Clone(good)
		c[at] ^= byte(1 + rng.IntN(255))
		if err := b.Load(bytes.NewReader(c)); err == nil {
			t.Fatalf("flip at byte %d of %d loaded", at, len(good))
		}
	}
	same(t, "after the flips", snap(t, b.Session()), before)
	if err := b.Load(bytes.NewReader(good)); err != nil {
		t.Fatal(err)
	}
	same(t, "after a good load", snap(t, b.Session()), snap(t, a.Session()))
}
