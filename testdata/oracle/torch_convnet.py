#!/usr/bin/python3
"""PyTorch oracle for a whole ConvNet training run (models/convnet).

Reads one JSON object on stdin: {"bn": bool, "params": {name: [values]},
"state": {name: [values]}, "x": [...], "y": [...], "steps": n}, with the
names of ngen's parameters (conv1.weight, bn1.running_mean, ...). Loads them
into the same model in float32, takes n Adam(lr 1e-3) steps on the batch in
training mode, and prints JSON: the loss of each step, every gradient of
step 1, every parameter and running statistic after the last step, and the
eval-mode logits after it.
"""

import json
import os
import sys

sys.dont_write_bytecode = True
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class ConvNet(nn.Module):
    def __init__(self, bn):
        super().__init__()
        self.bn = bn
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        if bn:
            self.bn1 = nn.BatchNorm2d(32)
            self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        h = self.conv1(x)
        if self.bn:
            h = self.bn1(h)
        h = F.max_pool2d(F.relu(h), 2)
        h = self.conv2(h)
        if self.bn:
            h = self.bn2(h)
        h = F.max_pool2d(F.relu(h), 2)
        return self.fc2(F.relu(self.fc1(torch.flatten(h, 1))))


def main():
    torch.set_num_threads(1)
    req = json.load(sys.stdin)
    model = ConvNet(req["bn"])
    sd = model.state_dict()
    for name, vals in list(req["params"].items()) + list(req.get("state", {}).items()):
        if name not in sd:
            raise SystemExit("torch_convnet.py: no tensor %r in the model (have %s)" % (name, ", ".join(sd)))
        sd[name] = torch.tensor(vals, dtype=torch.float32).reshape(sd[name].shape)
    model.load_state_dict(sd)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.tensor(req["x"], dtype=torch.float32).reshape(-1, 1, 28, 28)
    y = torch.tensor(req["y"], dtype=torch.long)
    out = {"loss": []}
    model.train()
    for step in range(req["steps"]):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if step == 0:
            out["grads"] = {n: p.grad.reshape(-1).tolist() for n, p in model.named_parameters()}
        opt.step()
        out["loss"].append(loss.item())
    out["params"] = {n: t.reshape(-1).tolist() for n, t in model.state_dict().items() if not n.endswith("num_batches_tracked")}
    model.eval()
    with torch.no_grad():
        out["eval_logits"] = model(x).reshape(-1).tolist()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
