package fuzzgen

// A model TestFuzz found, shrunk. It failed with:
//	gpu forms (spec 0): fused, GPU forms vs fused, baseline forms: loss per step: 1 of 3 values differ; worst [2]: -0.02499806322157383 vs -0.024854846298694611 (1.43× the tolerance 0.0001)

import "github.com/ngen-ml/ngen/dsl"

func init() {
	regressions = append(regressions, regression{name: "fuzz_324_min", model: modelFuzz324Min, spec: `{
  "name": "fuzz_324_min",
  "seed": 0,
  "data": 324,
  "dtype": "f32",
  "batch": 7,
  "nodes": [
    {
      "op": "input",
      "name": "xs1",
      "ints": [
        6,
        1,
        11,
        3
      ],
      "out": [
        [
          6,
          1,
          11,
          3
        ]
      ]
    },
    {
      "op": "input",
      "name": "x5",
      "ints": [
        -1,
        2,
        9
      ],
      "out": [
        [
          -1,
          2,
          9
        ]
      ]
    },
    {
      "op": "transformer",
      "args": [
        {
          "n": 1
        },
        {
          "n": 1
        }
      ],
      "name": "tf6",
      "ints": [
        1,
        1,
        1,
        4,
        1,
        1
      ],
      "str": "gelu",
      "out": [
        [
          -1,
          2,
          9
        ]
      ]
    },
    {
      "op": "mean",
      "args": [
        {
          "n": 2
        }
      ],
      "ints": [
        -3,
        -2,
        2
      ],
      "str": "keep",
      "out": [
        [
          1,
          1,
          1
        ]
      ]
    },
    {
      "op": "mean",
      "args": [
        {
          "n": 3
        }
      ],
      "out": [
        []
      ]
    }
  ],
  "output": {
    "n": 0
  },
  "loss": {
    "n": 4
  },
  "opt": {
    "kind": "adamw",
    "LR": 0.01,
    "NoWeightDecay": true
  }
}`})
}

// modelFuzz324Min declares fuzzgen model fuzz_324_min (generator seed 0, data seed 324, batch 7).
func modelFuzz324Min() *dsl.Model {
	const DT = dsl.F32
	m := dsl.NewModel("fuzz_324_min")
	v0 := m.Input("xs1", DT, 6, 1, 11, 3)
	v1 := m.Input("x5", DT, dsl.Batch, 2, 9)
	v2 := m.Transformer("tf6", v1, v1, 1, 1, 1, dsl.TransformerOptions{DimFeedforward: 4, Dropout: 0.0, Activation: "gelu", NormFirst: true}, dsl.Masks{TgtCausal: true})
	v3 := dsl.Mean(v2, true, -3, -2, 2)
	v4 := dsl.Mean(v3, false)
	m.Output(v0)
	m.Loss(v4)
	m.Optimizer(dsl.AdamW{LR: 0.01, NoWeightDecay: true})
	return m
}
