package fuzzgen

// A model TestFuzz found, shrunk (seeds 65..84, group of 20). A query
// whose every key is masked gives zeros, so the attention's outputs of
// that row all equal the output projection's bias and tie under Max; max's
// gradient went whole to each tie, torch.amax splits it evenly. Fixed in
// compiler/ops (max's gradient rule). It failed with:
//	torch (spec 0): fused, host vs torch: loss per step: 2 of 3 values differ; worst [2]: -0.49829350668734113 vs -0.2051328109463639 (2.93e+07× the tolerance 1e-08)
//	torch (spec 0): fused, host vs torch: step 1 gradient of mha3.in_proj_bias: 1 of 3 values differ; worst [2]: -0.44406085232756842 vs -0.20184584196707656 (2.02e+08× the tolerance 1.2e-09)
//	torch (spec 0): fused, host vs torch: step 1 gradient of mha3.in_proj_weight: 1 of 3 values differ; worst [2]: 0.24773580693814884 vs 0.088574591221948787 (1.46e+08× the tolerance 1.09e-09)
//	torch (spec 0): fused, host vs torch: step 1 gradient of mha3.out_proj.bias: 1 of 1 values differ; worst [0]: 2.4285714285714279 vs 0.99999999999999989 (7.14e+08× the tolerance 2e-09)
//	torch (spec 0): fused, host vs torch: step 1 gradient of mha3.out_proj.weight: 1 of 1 values differ; worst [0]: -0.78395613509442563 vs -0.28029292600106065 (3.93e+08× the tolerance 1.28e-09)
//	torch (spec 0): fused, host vs torch: mha3.in_proj_bias after 3 steps: 2 of 3 values differ; worst [2]: 0.12672795547832935 vs 0.065938597956168674 (1.23e+07× the tolerance 4.92e-09)
//	torch (spec 0): fused, host vs torch: mha3.in_proj_weight after 3 steps: 3 of 3 values differ; worst [2]: 0.86749363652985512 vs 0.87994803401458721 (5.19e+05× the tolerance 2.4e-08)
//	torch (spec 0): fused, host vs torch: mha3.out_proj.bias after 3 steps: 1 of 1 values differ; worst [0]: -0.69999999999999984 vs -0.29999999999999999 (3.33e+07× the tolerance 1.2e-08)
//	torch (spec 0): fused, host vs torch: mha3.out_proj.weight after 3 steps: 1 of 1 values differ; worst [0]: -0.22351082506350836 vs -0.24149471226210742 (2.07e+06× the tolerance 8.67e-09)
//	torch (spec 0): fused, host vs torch: eval-mode prediction after 3 steps: 7 of 7 values differ; worst [3]: -0.54980330939494548 vs -0.12026882185581769 (9.06e+07× the tolerance 4.74e-09)

import "github.com/ngen-ml/ngen/dsl"

func init() {
	regressions = append(regressions, regression{name: "fuzz_69_min", model: modelFuzz69Min, spec: `{
  "name": "fuzz_69_min",
  "seed": 0,
  "data": 69,
  "dtype": "f64",
  "batch": 7,
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
      "op": "mask",
      "name": "mask2",
      "ints": [
        -1,
        3
      ],
      "k": 2,
      "out": [
        [
          -1,
          3
        ]
      ]
    },
    {
      "op": "mha",
      "args": [
        {
          "n": 0
        },
        {
          "n": 0
        },
        {
          "n": 0
        },
        {
          "n": 1
        }
      ],
      "name": "mha3",
      "k": 1,
      "out": [
        [
          -1,
          3,
          1
        ]
      ]
    },
    {
      "op": "max",
      "args": [
        {
          "n": 2
        }
      ],
      "ints": [
        2,
        1
      ],
      "str": "keep",
      "out": [
        [
          -1,
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
    "n": 3
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

// modelFuzz69Min declares fuzzgen model fuzz_69_min (generator seed 0, data seed 69, batch 7).
func modelFuzz69Min() *dsl.Model {
	const DT = dsl.F64
	m := dsl.NewModel("fuzz_69_min")
	v0 := m.Input("x1", DT, dsl.Batch, 3, 1)
	v1 := m.Tokens("mask2", dsl.Batch, 3) // a 0/1 mask
	v2 := m.MultiheadAttention("mha3", v0, v0, v0, 1, dsl.Attention{Causal: false, KeyPadding: v1, Dropout: 0.0})
	v3 := dsl.Max(v2, true, 2, 1)
	v4 := dsl.Mean(v3, false)
	m.Output(v3)
	m.Loss(v4)
	m.Optimizer(dsl.SGD{LR: 0.1})
	return m
}
