package fuzzgen

// A model TestFuzz found, shrunk. It failed with:
//	torch (spec 0): fused, host vs torch: eval-mode prediction after 3 steps: 3 of 3 values differ; worst [2]: 0 vs 8.4991916082799435e-06 (90.9× the tolerance 9.35e-08)
//
// ngen was right: d_model is 1, so each LayerNorm normalises one value and
// x − mean is 0 exactly; PyTorch's kernel computes x·rstd − mean·rstd with
// an FMA, whose rounding error 1/√eps amplifies. Fixed in the comparison:
// a float32 mismatch against torch is rechecked against torch in float64,
// with torch's own float32 error added to the tolerance (oracle.go).

import "github.com/ngen-ml/ngen/dsl"

func init() {
	regressions = append(regressions, regression{name: "fuzz_364_min", model: modelFuzz364Min, spec: `{
  "name": "fuzz_364_min",
  "seed": 0,
  "data": 364,
  "dtype": "f32",
  "batch": 1,
  "nodes": [
    {
      "op": "input",
      "name": "x1",
      "ints": [
        -1,
        3,
        1
      ],
      "out": [
        [
          -1,
          3,
          1
        ]
      ]
    },
    {
      "op": "transformer",
      "args": [
        {
          "n": 0
        },
        {
          "n": 0
        }
      ],
      "name": "tf2",
      "ints": [
        1,
        1,
        1,
        1,
        1,
        0
      ],
      "str": "relu",
      "out": [
        [
          -1,
          3,
          1
        ]
      ]
    },
    {
      "op": "labels",
      "name": "y7",
      "ints": [
        -1,
        3
      ],
      "k": 1,
      "out": [
        [
          -1,
          3
        ]
      ]
    },
    {
      "op": "cross_entropy",
      "args": [
        {
          "n": 1
        },
        {
          "n": 2
        }
      ],
      "out": [
        []
      ]
    }
  ],
  "output": {
    "n": 1
  },
  "loss": {
    "n": 3
  },
  "opt": {
    "kind": "sgd",
    "LR": 0.1
  }
}`})
}

// modelFuzz364Min declares fuzzgen model fuzz_364_min (generator seed 0, data seed 364, batch 1).
func modelFuzz364Min() *dsl.Model {
	const DT = dsl.F32
	m := dsl.NewModel("fuzz_364_min")
	v0 := m.Input("x1", DT, dsl.Batch, 3, 1)
	v1 := m.Transformer("tf2", v0, v0, 1, 1, 1, dsl.TransformerOptions{DimFeedforward: 1, Dropout: 0.0, Activation: "relu", NormFirst: true}, dsl.Masks{TgtCausal: false})
	v2 := m.Labels("y7", dsl.Batch, 3) // classes in [0, 1)
	v3 := dsl.CrossEntropy(v1, v2)
	m.Output(v1)
	m.Loss(v3)
	m.Optimizer(dsl.SGD{LR: 0.1})
	return m
}
