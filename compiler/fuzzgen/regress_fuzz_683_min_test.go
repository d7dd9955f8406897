package fuzzgen

// A model TestFuzz found, shrunk. It failed with:
//	gpu forms (spec 0): fused, GPU forms vs fused, baseline forms: step 1 gradient of ln2.weight: 2 of 2 values differ; worst [0]: -1.1919537712401507e-07 vs 0 (want the same bits)
//	gpu forms (spec 0): fused, GPU forms vs fused, baseline forms: ln2.bias after 3 steps: 2 of 2 values differ; worst [0]: -1.7881394143159923e-08 vs 0 (want the same bits)
//
// One class, so the cross-entropy and every gradient are 0: the baseline
// forms compute them as 0, the GPU forms as 1e-7, and a tolerance scaled by
// the largest gradient was 0. Fixed in compare.go: a gradient's tolerance
// scales with the largest gradient or 1, whichever is larger.

import "github.com/ngen-ml/ngen/dsl"

func init() {
	regressions = append(regressions, regression{name: "fuzz_683_min", model: modelFuzz683Min, spec: `{
  "name": "fuzz_683_min",
  "seed": 0,
  "data": 683,
  "dtype": "f32",
  "batch": 5,
  "nodes": [
    {
      "op": "input",
      "name": "x1",
      "ints": [
        -1,
        2
      ],
      "out": [
        [
          -1,
          2
        ]
      ]
    },
    {
      "op": "layernorm",
      "args": [
        {
          "n": 0
        }
      ],
      "name": "ln2",
      "out": [
        [
          -1,
          2
        ]
      ]
    },
    {
      "op": "stack",
      "args": [
        {
          "n": 1
        },
        {
          "n": 1
        }
      ],
      "ints": [
        1
      ],
      "out": [
        [
          -1,
          2,
          2
        ]
      ]
    },
    {
      "op": "matmul",
      "args": [
        {
          "n": 2
        },
        {
          "n": 2
        }
      ],
      "ints": [
        0,
        1
      ],
      "out": [
        [
          -1,
          2,
          2
        ]
      ]
    },
    {
      "op": "labels",
      "name": "y3",
      "ints": [
        -1,
        2
      ],
      "k": 1,
      "out": [
        [
          -1,
          2
        ]
      ]
    },
    {
      "op": "cross_entropy",
      "args": [
        {
          "n": 3
        },
        {
          "n": 4
        }
      ],
      "out": [
        []
      ]
    }
  ],
  "output": {
    "n": 3
  },
  "loss": {
    "n": 5
  },
  "opt": {
    "kind": "sgd",
    "LR": 0.1
  }
}`})
}

// modelFuzz683Min declares fuzzgen model fuzz_683_min (generator seed 0, data seed 683, batch 5).
func modelFuzz683Min() *dsl.Model {
	const DT = dsl.F32
	m := dsl.NewModel("fuzz_683_min")
	v0 := m.Input("x1", DT, dsl.Batch, 2)
	v1 := m.LayerNorm("ln2", v0)
	v2 := dsl.Stack(1, v1, v1)
	v3 := dsl.MatMulT(v2, v2, false, true)
	v4 := m.Labels("y3", dsl.Batch, 2) // classes in [0, 1)
	v5 := dsl.CrossEntropy(v3, v4)
	m.Output(v3)
	m.Loss(v5)
	m.Optimizer(dsl.SGD{LR: 0.1})
	return m
}
