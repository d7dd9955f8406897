#!/usr/bin/python3
"""PyTorch oracle for a whole MLP training run.

Reads one JSON request on stdin and writes one JSON result on stdout. Used
by codegen/jit/mlp_oracle_test.go; run with /usr/bin/python3 (Debian's
python3-torch 1.13).

Request: {"dtype": "f32"|"f64", "layers": ["fc1", ...], "params": {name:
{"shape": [...], "data": [...]}}, "x": {...}, "y": [...], "p": dropout
probability, "masks": [[mask of hidden layer 1, ...] per step] (0/1 lists,
row-major over [B, width]), "steps": n, "optimizer": ir.Optimizer's JSON
(its parameter groups as torch_optim.py reads them; its "schedule", when present, is stepped after each optimizer step, as
torch_lr.py builds it; its "clip_value" and "clip_norm" clip the
gradients before each step with clip_grad_value_ and clip_grad_norm_),
"clip_norms" (optional): the max norm of each step, 0 for none, in place
of the optimizer's "clip_norm"}.
The model is Linear, then ReLU and Dropout after every layer but the last,
then cross-entropy; dropout multiplies by the given mask and by 1/(1-p),
as ngen's kernels do. "amp" ("bf16": torch.autocast; "f16": its
emulation, each GEMM's operands and result and the bias add rounded with
.half().float()) and "scaler" (GradScaler's emulation) are optional: the
training loop is torch_amp.py's, which describes them.

Result: torch_amp.train's: {"loss": [loss of each step], "grads": {name:
gradient at step 1}, "params": {name: value after all steps}, and with a
scaler "scales" and "skipped"}.
"""

import json
import sys

import torch
import torch.nn.functional as F

import torch_amp  # the training loop, beside this script

torch.set_num_threads(1)

FLOAT = {"f32": torch.float32, "f64": torch.float64}


def main():
    req = json.load(sys.stdin)
    dt = FLOAT[req["dtype"]]
    layers = req["layers"]
    params = {}
    for name, t in req["params"].items():
        params[name] = torch.tensor(t["data"], dtype=dt).reshape(t["shape"]).requires_grad_(True)
    x = torch.tensor(req["x"]["data"], dtype=dt).reshape(req["x"]["shape"])
    y = torch.tensor(req["y"], dtype=torch.long)
    p = req["p"]
    scale = 1.0 / (1.0 - p)
    f16 = req.get("amp") == "f16"

    def forward(step, r16):
        h = x
        for i, name in enumerate(layers):
            w, b = params[name + ".weight"], params[name + ".bias"]
            if f16:
                h = r16(r16(r16(h) @ torch_amp.weight16(w).t()) + r16(b))
            else:
                h = F.linear(h, w, b)
            if i < len(layers) - 1:
                h = torch.relu(h)
                if p > 0:
                    m = torch.tensor(req["masks"][step][i], dtype=dt).reshape(h.shape)
                    h = h * (m * scale)
        return F.cross_entropy(h, y)

    json.dump(torch_amp.train(req, params, forward), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
