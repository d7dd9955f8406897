package fuzzgen

// A model TestFuzz found, shrunk. It failed with:
//	torch (spec 0): fused, host vs torch: eval-mode prediction after 3 steps: 25 of 25 values differ; worst [24]: 1.8536956598084249 vs 2.33856938828667 (1.04e+07× the tolerance 4.68e-08)
//
// Found in session 15 by shrinking seed 553's first failure (since fixed
// in the generator) with Adam and weight decay: fc3 is used by the output
// but not by the loss, so no gradient reaches it. PyTorch leaves a
// parameter whose .grad is None alone (no step, no decay); ngen's fused
// update decayed it (Adam's L2 term, AdamW's decoupled decay, SGD's
// decay). Fixed in the compiler: autodiff records such parameters
// (ir.Func.Unreached) and the optimizer's update skips them. The shrunk
// model's loss was the mean of an input, which depends on no parameter at
// all, which is now an error (as PyTorch's backward refuses it), so fc4
// gives the loss a parameter of its own.

import "github.com/ngen-ml/ngen/dsl"

func init() {
	regressions = append(regressions, regression{name: "fuzz_553_nograd", model: modelFuzz553NoGrad, spec: `{
  "name": "fuzz_553_nograd",
  "seed": 0,
  "data": 553,
  "dtype": "f64",
  "batch": 5,
  "nodes": [
    {
      "op": "input",
      "name": "x1",
      "ints": [
        -1,
        6
      ],
      "out": [
        [
          -1,
          6
        ]
      ]
    },
    {
      "op": "input",
      "name": "xs1",
      "ints": [
        1,
        1
      ],
      "out": [
        [
          1,
          1
        ]
      ]
    },
    {
      "op": "linear",
      "args": [
        {
          "n": 0
        }
      ],
      "name": "fc3",
      "k": 6,
      "out": [
        [
          -1,
          6
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
          -1
        ]
      ]
    },
    {
      "op": "linear",
      "args": [
        {
          "n": 1
        }
      ],
      "name": "fc4",
      "k": 1,
      "out": [
        [
          1,
          1
        ]
      ]
    },
    {
      "op": "mean",
      "args": [
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
    "kind": "adam",
    "LR": 0.01,
    "WeightDecay": 0.01,
    "Beta1": 0.8,
    "Beta2": 0.99,
    "Eps": 1e-06
  }
}`})
}

// modelFuzz553NoGrad declares fuzzgen model fuzz_553_nograd (generator seed 0, data seed 553, batch 5).
func modelFuzz553NoGrad() *dsl.Model {
	const DT = dsl.F64
	m := dsl.NewModel("fuzz_553_nograd")
	v0 := m.Input("x1", DT, dsl.Batch, 6)
	v1 := m.Input("xs1", DT, 1, 1)
	v2 := m.Linear("fc3", v0, 6)
	v3 := dsl.MatMulT(v2, v2, false, true)
	v4 := m.Linear("fc4", v1, 1)
	v5 := dsl.Mean(v4, false)
	m.Output(v3)
	m.Loss(v5)
	m.Optimizer(dsl.Adam{LR: 0.01, Beta1: 0.8, Beta2: 0.99, Eps: 1e-06, WeightDecay: 0.01})
	return m
}
