package fuzzgen

// A model TestFuzz found, shrunk. It failed with:
//	torch (spec -1): oracle: torch_fuzz.py: Traceback (most recent call last):
//	  File "/work/fuzz/testdata/oracle/serve.py", line 67, in serve
//	    code = load(head["script"]).main()
//	           ^^^^^^^^^^^^^^^^^^^^^^^^^^^
//	  File "/work/fuzz/testdata/oracle/torch_fuzz.py", line 437, in main
//	    out = [run_spec(req, s) for s in req["specs"]]
//	          ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
//	  File "/work/fuzz/testdata/oracle/torch_fuzz.py", line 437, in <listcomp>
//	    out = [run_spec(req, s) for s in req["specs"]]
//	           ^^^^^^^^^^^^^^^^
//	  File "/work/fuzz/testdata/oracle/torch_fuzz.py", line 421, in run_spec
//	    loss.backward()
//	  File "/usr/lib/python3/dist-packages/torch/_tensor.py", line 488, in backward
//	    torch.autograd.backward(
//	  File "/usr/lib/python3/dist-packages/torch/autograd/__init__.py", line 197, in backward
//	    Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass
//	RuntimeError: element 0 of tensors does not require grad and does not have a grad_fn
//
// The shrinker kept the check that failed (torch) but not the failure: the
// first was a LayerNorm gradient (as fuzz_506), the shrunk model's a loss
// that no parameter reaches, on which torch_fuzz.py called backward() and
// failed. Both fixed in the oracle script.

import "github.com/ngen-ml/ngen/dsl"

func init() {
	regressions = append(regressions, regression{name: "fuzz_553_min", model: modelFuzz553Min, spec: `{
  "name": "fuzz_553_min",
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
      "k": 1,
      "out": [
        [
          -1,
          1
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
      "op": "mean",
      "args": [
        {
          "n": 1
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

// modelFuzz553Min declares fuzzgen model fuzz_553_min (generator seed 0, data seed 553, batch 5).
func modelFuzz553Min() *dsl.Model {
	const DT = dsl.F64
	m := dsl.NewModel("fuzz_553_min")
	v0 := m.Input("x1", DT, dsl.Batch, 6)
	v1 := m.Input("xs1", DT, 1, 1)
	v2 := m.Linear("fc3", v0, 1)
	v3 := dsl.MatMulT(v2, v2, false, true)
	v4 := dsl.Mean(v1, false)
	m.Output(v3)
	m.Loss(v4)
	m.Optimizer(dsl.SGD{LR: 0.1})
	return m
}
