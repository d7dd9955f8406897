package runtime

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime/safetensors"
)

// A model of three checkpoint tensors: a parameter, declared state and
// the parameter's Adam moment.
var fuzzNames = []string{"fc.weight", "bn.running_mean", OptimizerPrefix + "fc.weight.exp_avg"}

var fuzzEnts = map[string]ckptEntry{
	"fc.weight":                           {buf: 0, n: 6, shape: []int64{2, 3}, dtype: F32},
	"bn.running_mean":                     {buf: 1, n: 3, shape: []int64{3}, dtype: F32},
	OptimizerPrefix + "fc.weight.exp_avg": {buf: 2, n: 6, shape: []int64{2, 3}, dtype: F32, opt: true},
}

func f32s(vs ...float32) []byte {
	b := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func fuzzFile(t testing.TB, meta map[string]string, ts []safetensors.Tensor) []byte {
	b, err := encodeCheckpoint(meta, ts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func goodTensors() []safetensors.Tensor {
	return []safetensors.Tensor{
		{Name: "fc.weight", DType: "F32", Shape: []int64{2, 3}, Data: f32s(1, 2, 3, 4, 5, 6)},
		{Name: "bn.running_mean", DType: "F32", Shape: []int64{3}, Data: f32s(0, 0, 0)},
		{Name: OptimizerPrefix + "fc.weight.exp_avg", DType: "F32", Shape: []int64{2, 3}, Data: f32s(0, 0, 0, 0, 0, 0)},
	}
}

// checkpointSeeds: a good file and issue 13's bad ones, each signed so
// that the check after the checksum is reached.
func checkpointSeeds(t testing.TB) map[string][]byte {
	meta := map[string]string{"ngen.step": "4", "ngen.lr": "0.001"}
	seeds := map[string][]byte{"good": fuzzFile(t, meta, goodTensors())}
	mod := func(name string, fn func(ts []safetensors.Tensor) []safetensors.Tensor, m map[string]string) {
		if m == nil {
			m = meta
		}
		seeds[name] = fuzzFile(t, m, fn(goodTensors()))
	}
	mod("other shape", func(ts []safetensors.Tensor) []safetensors.Tensor { ts[0].Shape = []int64{3, 2}; return ts }, nil)
	mod("other dtype", func(ts []safetensors.Tensor) []safetensors.Tensor {
		ts[1].DType, ts[1].Data = "F64", make([]byte, 24)
		return ts
	}, nil)
	mod("NaN", func(ts []safetensors.Tensor) []safetensors.Tensor {
		ts[0].Data = f32s(1, 2, float32(math.NaN()), 4, 5, 6)
		return ts
	}, nil)
	mod("missing", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts[1:] }, nil)
	mod("half the optimizer", func(ts []safetensors.Tensor) []safetensors.Tensor {
		return append(ts, safetensors.Tensor{Name: OptimizerPrefix + "fc.weight.exp_avg_sq", DType: "F32", Shape: []int64{2, 3}, Data: make([]byte, 24)})
	}, nil)
	mod("step 2^64-1", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, map[string]string{"ngen.step": "18446744073709551615"})
	mod("lr NaN", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, map[string]string{"ngen.lr": "NaN"})
	seeds["trailing"] = append(append([]byte(nil), seeds["good"]...), 0)
	return seeds
}

func TestDecodeCheckpoint(t *testing.T) {
	for name, b := range checkpointSeeds(t) {
		c, err := decodeCheckpoint(b, fuzzNames, fuzzEnts, 0.5, 7)
		if name == "good" {
			if err != nil || c.step != 4 || c.lr != 0.001 || c.seed != 7 || len(c.data) != 3 {
				t.Fatalf("good: %+v, %v", c, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A file from PyTorch without optimizer state starts a fresh one.
	c, err := decodeCheckpoint(fuzzFile(t, map[string]string{"ngen.step": "9"}, goodTensors()[:2]), fuzzNames, fuzzEnts, 0.5, 7)
	if err != nil || c.step != 0 || c.lr != 0.5 {
		t.Fatalf("without optimizer state: %+v, %v", c, err)
	}
}

// FuzzDecodeCheckpoint: whatever the bytes, decoding returns an error or
// tensors of exactly the model's shapes with finite values; never a panic.
func FuzzDecodeCheckpoint(f *testing.F) {
	for _, b := range checkpointSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := decodeCheckpoint(b, fuzzNames, fuzzEnts, 0.5, 7)
		if err != nil {
			if strings.Contains(err.Error(), "%!") {
				t.Fatalf("malformed message: %v", err)
			}
			return
		}
		for n, d := range c.data {
			e := fuzzEnts[n]
			if int64(len(d)) != e.n*4 || nonFinite(d, F32) >= 0 {
				t.Fatalf("%s: %d bytes or non-finite", n, len(d))
			}
		}
		if c.step < 0 || math.IsNaN(c.lr) || c.lr < 0 {
			t.Fatalf("counters %+v", c)
		}
	})
}

// TestEveryByteFlipRejected: issue 13 found 1,640 of 1,823 single-byte
// flips of a checkpoint loading without error. With the checksum over the
// whole file, every flip of every byte is rejected.
func TestEveryByteFlipRejected(t *testing.T) {
	good := checkpointSeeds(t)["good"]
	c := append([]byte(nil), good...)
	for i := range c {
		for _, x := range []byte{0x01, 0x20, 0x80, 0xff} {
			c[i] ^= x
			if _, err := decodeCheckpoint(c, fuzzNames, fuzzEnts, 0.5, 7); err == nil {
				t.Fatalf("flip 0x%02x at byte %d of %d accepted", x, i, len(c))
			}
			c[i] ^= x
		}
	}
}
