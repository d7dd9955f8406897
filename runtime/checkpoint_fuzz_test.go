package runtime

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/ngen-ml/ngen/runtime/safetensors"
)

// A model of four checkpoint tensors: a parameter, declared state and
// the parameter's Adam moments.
var fuzzNames = []string{"fc.weight", "bn.running_mean", OptimizerPrefix + "fc.weight.exp_avg", OptimizerPrefix + "fc.weight.exp_avg_sq"}

var fuzzOpt = Optimizer{Kind: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}

var fuzzEnts = map[string]ckptEntry{
	"fc.weight":                              {buf: 0, n: 6, shape: []int64{2, 3}, dtype: F32},
	"bn.running_mean":                        {buf: 1, n: 3, shape: []int64{3}, dtype: F32},
	OptimizerPrefix + "fc.weight.exp_avg":    {buf: 2, n: 6, shape: []int64{2, 3}, dtype: F32, opt: true},
	OptimizerPrefix + "fc.weight.exp_avg_sq": {buf: 3, n: 6, shape: []int64{2, 3}, dtype: F32, opt: true},
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
		{Name: OptimizerPrefix + "fc.weight.exp_avg", DType: "F32", Shape: []int64{2, 3}, Data: f32s(0.01, -0.02, 0, 0, 0, 0)},
		{Name: OptimizerPrefix + "fc.weight.exp_avg_sq", DType: "F32", Shape: []int64{2, 3}, Data: f32s(1e-5, 2e-5, 0, 0, 0, 1)},
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
	mod("half the optimizer", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts[:3] }, nil)
	mod("exp_avg 3e38", func(ts []safetensors.Tensor) []safetensors.Tensor {
		ts[2].Data = f32s(3e38, 0, 0, 0, 0, 0)
		return ts
	}, nil)
	mod("exp_avg beyond the moments' bound", func(ts []safetensors.Tensor) []safetensors.Tensor {
		ts[2].Data = f32s(0.01, -0.02, 0, 0, 0, 6) // 6 > C_4·sqrt(1)
		return ts
	}, nil)
	mod("moments at step 0", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, map[string]string{"ngen.step": "0", "ngen.lr": "0.001"})
	mod("step 2^64-1", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, map[string]string{"ngen.step": "18446744073709551615"})
	mod("lr NaN", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, map[string]string{"ngen.lr": "NaN"})
	// Issue 27: a correctly signed rate of 3.4e38 loaded, and the next
	// step turned every weight non-finite.
	mod("lr 3.4e38", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, map[string]string{"ngen.step": "4", "ngen.lr": "3.4e38"})
	mod("lr above MaxLR", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, map[string]string{"ngen.step": "4", "ngen.lr": "1000001"})
	sched := func(v string) map[string]string {
		return map[string]string{"ngen.step": "4", "ngen.lr": "0.001", "ngen.schedule": v}
	}
	mod("schedule not JSON", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, sched(`{"kind":"step"`))
	mod("schedule unknown field", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, sched(`{"kind":"step","step_size":3,"gamma":0.5,"warp":1}`))
	mod("schedule step size 0", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, sched(`{"kind":"step","gamma":0.5}`))
	mod("schedule eta_min above lr", func(ts []safetensors.Tensor) []safetensors.Tensor { return ts }, sched(`{"kind":"cosine","t_max":10,"min":0.5}`))
	seeds["trailing"] = append(append([]byte(nil), seeds["good"]...), 0)
	return seeds
}

func TestDecodeCheckpoint(t *testing.T) {
	for name, b := range checkpointSeeds(t) {
		c, err := decodeCheckpoint(b, fuzzNames, fuzzEnts, fuzzOpt, 0.5, 7)
		if name == "good" {
			if err != nil || c.step != 4 || c.lr != 0.001 || c.seed != 7 || len(c.data) != 4 {
				t.Fatalf("good: %+v, %v", c, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A file from PyTorch without optimizer state starts a fresh one.
	c, err := decodeCheckpoint(fuzzFile(t, map[string]string{"ngen.step": "9"}, goodTensors()[:2]), fuzzNames, fuzzEnts, fuzzOpt, 0.5, 7)
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
		c, err := decodeCheckpoint(b, fuzzNames, fuzzEnts, fuzzOpt, 0.5, 7)
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
		if c.step < 0 || math.IsNaN(c.lr) || c.lr < 0 || c.lr > MaxLR {
			t.Fatalf("counters %+v", c)
		}
		// Accepted Adam moments satisfy the step-free bound (its closed
		// form, not the code under test).
		m, v := c.data[fuzzNames[2]], c.data[fuzzNames[3]]
		if m != nil {
			b1, b2 := fuzzOpt.Beta1, fuzzOpt.Beta2
			lim := (1 - b1) / math.Sqrt(1-b2) / math.Sqrt(1-b1*b1/b2) * (1 + adamRoundTol)
			for k := 0; k < 6; k++ {
				mk, vk := elem(m, F32, int64(k)), elem(v, F32, int64(k))
				if vk < 0 || math.Abs(mk) > lim*math.Sqrt(vk+0x1p-126/(1-b2)) {
					t.Fatalf("accepted moments m=%g v=%g at %d", mk, vk, k)
				}
			}
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
			if _, err := decodeCheckpoint(c, fuzzNames, fuzzEnts, fuzzOpt, 0.5, 7); err == nil {
				t.Fatalf("flip 0x%02x at byte %d of %d accepted", x, i, len(c))
			}
			c[i] ^= x
		}
	}
}

// TestDecodeSchedule: ngen.schedule restores a schedule, "none" a
// constant rate (SetLR's override), and a file without it leaves the
// session's.
func TestDecodeSchedule(t *testing.T) {
	good := fuzzFile(t, map[string]string{"ngen.step": "4", "ngen.lr": "0.001", "ngen.schedule": `{"kind":"step","step_size":3,"gamma":0.5}`}, goodTensors())
	c, err := decodeCheckpoint(good, fuzzNames, fuzzEnts, fuzzOpt, 0.5, 7)
	if err != nil || !c.schedSet || c.sched == nil || c.sched.Kind != "step" || c.sched.StepSize != 3 || c.sched.Gamma != 0.5 {
		t.Fatalf("a step schedule: %+v, %v", c, err)
	}
	none := fuzzFile(t, map[string]string{"ngen.step": "4", "ngen.lr": "0.001", "ngen.schedule": "none"}, goodTensors())
	if c, err := decodeCheckpoint(none, fuzzNames, fuzzEnts, fuzzOpt, 0.5, 7); err != nil || !c.schedSet || c.sched != nil {
		t.Fatalf("none: %+v, %v", c, err)
	}
	old := fuzzFile(t, map[string]string{"ngen.step": "4", "ngen.lr": "0.001"}, goodTensors())
	if c, err := decodeCheckpoint(old, fuzzNames, fuzzEnts, fuzzOpt, 0.5, 7); err != nil || c.schedSet {
		t.Fatalf("no ngen.schedule: %+v, %v", c, err)
	}
}
