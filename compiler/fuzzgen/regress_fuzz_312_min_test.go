package fuzzgen

// A model TestFuzz found, shrunk. It failed with:
//	torch (spec 0): fused, host vs torch: loss per step: 2 of 3 values differ; worst [2]: 0.27329358458518982 vs 0.34126535058021545 (6.8× the tolerance 0.01)
//	torch (spec 0): fused, host vs torch: step 1 gradient of ln2.bias: 2 of 2 values differ; worst [0]: 0.45831051468849182 vs 0 (want the same bits)
//	torch (spec 0): fused, host vs torch: step 1 gradient of ln2.weight: 2 of 2 values differ; worst [0]: 0.47013676166534424 vs 0 (want the same bits)
//	torch (spec 0): fused, host vs torch: ln2.bias after 3 steps: 2 of 2 values differ; worst [1]: -0.037313207983970642 vs -2.8025969286496341e-45 (1.26e+16× the tolerance 2.97e-18)
//	torch (spec 0): fused, host vs torch: ln2.weight after 3 steps: 2 of 2 values differ; worst [0]: 0.88280785083770752 vs 1 (10.7× the tolerance 0.011)
//	torch (spec 0): fused, host vs torch: eval-mode prediction after 3 steps: 1 of 1 values differ; worst [0]: 0.23133441805839539 vs 0.34126216173171997 (29.3× the tolerance 0.00375)

import "github.com/ngen-ml/ngen/dsl"

func init() {
	regressions = append(regressions, regression{name: "fuzz_312_min", model: modelFuzz312Min, spec: `{
  "name": "fuzz_312_min",
  "seed": 0,
  "data": 312,
  "dtype": "f32",
  "batch": 7,
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
      "op": "gelu",
      "args": [
        {
          "n": 1
        }
      ],
      "out": [
        [
          -1,
          2
        ]
      ]
    },
    {
      "op": "permute",
      "args": [
        {
          "n": 2
        }
      ],
      "ints": [
        1,
        0
      ],
      "out": [
        [
          2,
          -1
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
    "n": 4
  },
  "loss": {
    "n": 4
  },
  "opt": {
    "kind": "sgd",
    "LR": 0.1
  }
}`})
}

// modelFuzz312Min declares fuzzgen model fuzz_312_min (generator seed 0, data seed 312, batch 7).
func modelFuzz312Min() *dsl.Model {
	const DT = dsl.F32
	m := dsl.NewModel("fuzz_312_min")
	v0 := m.Input("x1", DT, dsl.Batch, 2)
	v1 := m.LayerNorm("ln2", v0)
	v2 := dsl.GELU(v1)
	v3 := dsl.Permute(v2, 1, 0)
	v4 := dsl.Mean(v3, false)
	m.Output(v4)
	m.Loss(v4)
	m.Optimizer(dsl.SGD{LR: 0.1})
	return m
}
