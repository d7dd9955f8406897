package fuzzgen

// A model TestFuzz found, shrunk. It failed with:
//	torch (spec 0): fused, host vs torch: step 1 gradient of ln4.bias: 4 of 4 values differ; worst [0]: 0 vs 0.25000000000000006 (5e+08× the tolerance 5e-10)
//	torch (spec 0): fused, host vs torch: loss per step: 2 of 3 values differ; worst [1]: 0.26421294856059174 vs 0.2572685041161471 (6.94e+05× the tolerance 1e-08)
//	torch (spec 0): fused, host vs torch: ln4.bias after 3 steps: 4 of 4 values differ; worst [0]: 0 vs -0.025000000000000008 (1.11e+07× the tolerance 2.25e-09)
//
// ngen was right: the convolution's padding made whole rows of the
// LayerNorm's input constant, which normalise to exactly 0; PyTorch's CPU
// kernel computes x·rstd − mean·rstd with an FMA, whose rounding the ReLU
// after it turned into gradients of 0 or 1 at random. Fixed in the oracle:
// torch_fuzz.py's LayerNorm is composed of torch ops on the row shifted by
// its first element (_shifted_layer_norm), exact for constant rows.

import "github.com/ngen-ml/ngen/dsl"

func init() {
	regressions = append(regressions, regression{name: "fuzz_506_min", model: modelFuzz506Min, spec: `{
  "name": "fuzz_506_min",
  "seed": 0,
  "data": 506,
  "dtype": "f64",
  "batch": 3,
  "nodes": [
    {
      "op": "input",
      "name": "x1",
      "ints": [
        -1,
        5,
        6,
        2
      ],
      "out": [
        [
          -1,
          5,
          6,
          2
        ]
      ]
    },
    {
      "op": "conv2d",
      "args": [
        {
          "n": 0
        }
      ],
      "name": "conv2",
      "ints": [
        1,
        1,
        2,
        2,
        2,
        0
      ],
      "out": [
        [
          -1,
          1,
          5,
          3
        ]
      ]
    },
    {
      "op": "maxpool",
      "args": [
        {
          "n": 1
        }
      ],
      "ints": [
        2,
        1,
        1,
        0
      ],
      "out": [
        [
          -1,
          1,
          6,
          4
        ]
      ]
    },
    {
      "op": "layernorm",
      "args": [
        {
          "n": 2
        }
      ],
      "name": "ln4",
      "f": 0.001,
      "out": [
        [
          -1,
          1,
          6,
          4
        ]
      ]
    },
    {
      "op": "relu",
      "args": [
        {
          "n": 3
        }
      ],
      "out": [
        [
          -1,
          1,
          6,
          4
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
    "n": 4
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

// modelFuzz506Min declares fuzzgen model fuzz_506_min (generator seed 0, data seed 506, batch 3).
func modelFuzz506Min() *dsl.Model {
	const DT = dsl.F64
	m := dsl.NewModel("fuzz_506_min")
	v0 := m.Input("x1", DT, dsl.Batch, 5, 6, 2)
	v1 := m.Conv2d("conv2", v0, 1, 1, dsl.Conv{Stride: 2, Padding: 2, Dilation: 2, Groups: 0, NoBias: false})
	v2 := dsl.MaxPool2d(v1, 2, dsl.Pool{Stride: 1, Padding: 1, Dilation: 0})
	v3 := m.LayerNorm("ln4", v2, 0.001)
	v4 := dsl.ReLU(v3)
	v5 := dsl.Mean(v4, false)
	m.Output(v4)
	m.Loss(v5)
	m.Optimizer(dsl.SGD{LR: 0.1})
	return m
}
