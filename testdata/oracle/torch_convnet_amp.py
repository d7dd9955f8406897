#!/usr/bin/python3
"""PyTorch oracle for the seed ConvNet (models/convnet: ConvNet, and
ConvNetBN with "bn") at any size, trained by torch_amp.py's loop: under
mixed precision (codegen/jit's TestAMPConvOracle) or in f32.

Request: torch_mlp.py's "params" ({name: {"shape", "data"}}, names as
ngen's: conv1.weight, bn1.bias, fc2.weight, ...), "x" ({"shape": [B, C,
H, W], "data"}), "y", "steps", "optimizer", "amp" and "scaler"; "bn":
whether a BatchNorm2d follows each convolution, and "state": its running
statistics ({name: {"shape", "data"}}: bn1.running_mean, ...).
The model is conv 3×3 (pad 1), [BatchNorm2d in training mode], ReLU,
max-pool 2, twice, then flatten, Linear, ReLU, Linear and cross-entropy.
Under "amp": "f16" (torch_amp.py's emulation) a convolution is rounded as
ngen computes it, like a Linear: its input and weight, the product, the
bias and the sum; batch norm reads the rounded values in f32 and writes
f32, as ngen's does.

Result: torch_amp.train's, and "state": the running statistics after the
last step.
"""

import json
import sys

import torch
import torch.nn.functional as F

import torch_amp  # the training loop, beside this script

torch.set_num_threads(1)


def tensor(t):
    return torch.tensor(t["data"], dtype=torch.float32).reshape(t["shape"])


def main():
    req = json.load(sys.stdin)
    params = {n: tensor(t).requires_grad_(True) for n, t in req["params"].items()}
    state = {n: tensor(t) for n, t in req.get("state", {}).items()}
    x, y = tensor(req["x"]), torch.tensor(req["y"], dtype=torch.long)
    bn, f16 = req["bn"], req.get("amp") == "f16"

    def forward(step, r16):
        def conv(h, n):
            w, b = params[n + ".weight"], params[n + ".bias"]
            if f16:
                return r16(r16(F.conv2d(r16(h), r16(w), padding=1)) + r16(b).reshape(1, -1, 1, 1))
            return F.conv2d(h, w, b, padding=1)

        def linear(h, n):
            w, b = params[n + ".weight"], params[n + ".bias"]
            if f16:
                return r16(r16(r16(h) @ torch_amp.weight16(w).t()) + r16(b))
            return F.linear(h, w, b)

        h = x
        for i in (1, 2):
            h = conv(h, "conv%d" % i)
            if bn:
                n = "bn%d" % i
                h = F.batch_norm(h, state[n + ".running_mean"], state[n + ".running_var"],
                                 params[n + ".weight"], params[n + ".bias"], training=True, momentum=0.1, eps=1e-5)
            h = F.max_pool2d(F.relu(h), 2)
        h = F.relu(linear(torch.flatten(h, 1), "fc1"))
        return F.cross_entropy(linear(h, "fc2"), y)

    out = torch_amp.train(req, params, forward)
    out["state"] = {n: torch_amp.flat(t) for n, t in state.items()}
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
