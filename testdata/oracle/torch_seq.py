#!/usr/bin/python3
"""Whole-model oracle for the seed sequence models (models/rnn, models/lstm):
reads one JSON request on stdin, runs the model with torch.nn.RNN or
torch.nn.LSTM from the given weights and writes the forward results before
training, the loss of each of `steps` Adam steps, every gradient of the
first step and every parameter after the last.

Request: {"model": "rnn" | "lstm" | "charlm", "dtype": "f32" | "f64",
"sizes": {"vocab", "emb", "hidden", "layers", "T", "classes"},
"params": {name: {"shape", "data"}} (ngen's names, PyTorch's state_dict
names), "x" [B*T] ids, "y" targets, "mask" [B*T] (rnn), "h0", "c0"
[layers*B*hidden] (absent: zeros), "steps", "optimizer": ir.Optimizer's
JSON (Adam or SGD, torch_optim.py), "amp": "bf16" (optional: the forward
pass and the loss run under torch.autocast(device_type="cpu",
dtype=torch.bfloat16), which keeps nn.RNN and nn.LSTM in f32 and runs
the Linear in bf16; parameters and the optimizer stay f32)}.

Response: {"output": logits, "hn", "cn", "loss": [...], "grads": {name:
[...]}, "params": {name: [...]}}, all flat, row-major.

rnn: Embedding -> nn.RNN(tanh, batch_first) with the step mask of
dsl.Recurrent (a padded step keeps every layer's state), run one step at
a time through the same nn.RNN module -> the last layer's final state ->
Linear. lstm: Embedding -> nn.LSTM(batch_first) from (h0, c0) -> Linear on
the last position. charlm: the same LSTM from zero states, Linear at every
position, the loss averaged over all positions.
"""

import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_optim  # the optimizer, beside this script

torch.set_num_threads(1)


def main():
    req = json.load(sys.stdin)
    dt = torch.float64 if req["dtype"] == "f64" else torch.float32
    s = req["sizes"]
    B = len(req["x"]) // s["T"]
    x = torch.tensor(req["x"], dtype=torch.int64).reshape(B, s["T"])
    y = torch.tensor(req["y"], dtype=torch.int64)
    kind = req["model"]
    emb = nn.Embedding(s["vocab"], s["emb"])
    if kind == "rnn":
        rec = nn.RNN(s["emb"], s["hidden"], num_layers=s["layers"], batch_first=True)
        fc = nn.Linear(s["hidden"], s["classes"])
    else:
        rec = nn.LSTM(s["emb"], s["hidden"], num_layers=s["layers"], batch_first=True)
        fc = nn.Linear(s["hidden"], s["vocab"])
    mods = {"emb": emb, kind if kind == "rnn" else "lstm": rec, "fc": fc}
    named = {}
    for prefix, m in mods.items():
        m.to(dt)
        for n, p in m.named_parameters():
            named[prefix + "." + n] = p
    with torch.no_grad():
        for n, p in named.items():
            p.copy_(torch.tensor(req["params"][n]["data"], dtype=dt).reshape(p.shape))

    def state(key):
        if key not in req:
            return torch.zeros(s["layers"], B, s["hidden"], dtype=dt)
        return torch.tensor(req[key], dtype=dt).reshape(s["layers"], B, s["hidden"])

    h0, c0 = state("h0"), state("c0")
    mask = torch.tensor(req["mask"]).reshape(B, s["T"]) if "mask" in req else None

    def forward():
        e = emb(x)
        if kind == "rnn":
            h = h0
            for t in range(s["T"]):
                _, hn = rec(e[:, t:t + 1], h)
                keep = (mask[:, t] != 0)[None, :, None]
                h = torch.where(keep, hn, h)
            return fc(h[-1]), h, None
        out, (hn, cn) = rec(e, (h0, c0))
        if kind == "lstm":
            return fc(out[:, -1]), hn, cn
        return fc(out), hn, cn

    amp = req.get("amp") == "bf16"

    def autocast():
        return torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=amp)

    res = {}
    with torch.no_grad(), autocast():
        logits, hn, cn = forward()
    res["output"] = logits.double().reshape(-1).tolist()
    res["hn"] = hn.double().reshape(-1).tolist()
    if cn is not None:
        res["cn"] = cn.double().reshape(-1).tolist()
    opt = torch_optim.build(named, req["optimizer"])
    res["loss"] = []
    for step in range(req["steps"]):
        opt.zero_grad()
        with autocast():
            logits, _, _ = forward()
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        if step == 0:
            res["grads"] = {n: p.grad.reshape(-1).tolist() for n, p in named.items()}
        opt.step()
        res["loss"].append(loss.item())
    res["params"] = {n: p.detach().reshape(-1).tolist() for n, p in named.items()}
    json.dump(res, sys.stdout)


if __name__ == "__main__":
    main()
