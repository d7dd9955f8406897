#!/usr/bin/python3
"""PyTorch oracle for the whole language models of models/transformer: the
very modules that cmd/train -torch trains beside ngen (bench/torch_models.py,
transformer_lm), built small, loaded with the given state_dict, and trained
with torch.optim.Adam on F.cross_entropy over every position, as
bench/torch_train.py trains them.

Request (JSON on stdin): {"dtype": "f32"|"f64", "model": "gpt"|"transformer",
"vocab", "d_model", "nhead", "dim_ff", "layers" (gpt), "num_enc", "num_dec"
(transformer), "max_len", "x" ([B, T] ids; for the transformer [B, 2T],
source then target), "y" ([B, T] ids), "params" {state_dict name: tensor
{"shape", "data"}}, "steps", "lr", "beta1", "beta2", "eps"} (Adam), or "optimizer": ir.Optimizer's
JSON with its parameter groups, as torch_optim.py reads it. Dropout is 0.

Result: {"logits": first forward logits (flat), "loss": [per step],
"grads": {name: gradient at step 1}, "params": {name: after all steps}}.
Every state_dict entry but the positional table (the buffer "pe") must be
given. "amp": "bf16" (with dtype f32) trains under
torch.autocast(device_type="cpu", dtype=torch.bfloat16). Used by
models/transformer/oracle_test.go and amp_oracle_test.go.
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import torch_models  # noqa: E402
import torch_optim  # noqa: E402  (beside this script)

torch.set_num_threads(1)

FLOAT = {"f32": torch.float32, "f64": torch.float64}


def main():
    req = json.load(sys.stdin)
    dt = FLOAT[req["dtype"]]
    model = torch_models.transformer_lm(req["model"], req["vocab"], d=req["d_model"], heads=req["nhead"],
                                        ff=req["dim_ff"], dropout=0.0, max_len=req["max_len"],
                                        layers=req.get("layers", 0), enc=req.get("num_enc", 0),
                                        dec=req.get("num_dec", 0)).to(dt)
    state = {n: torch.tensor(t["data"], dtype=dt).reshape(t["shape"]) for n, t in req["params"].items()}
    # The table in the request's precision: ngen computes it in float64
    # and rounds once; PyTorch's float32 table is off by an f32 rounding.
    state["pe"] = torch_models.sinusoid_table(req["max_len"], req["d_model"], dt)
    model.load_state_dict(state, strict=True)
    x = torch.tensor(req["x"], dtype=torch.long)
    y = torch.tensor(req["y"], dtype=torch.long)

    if "optimizer" in req:
        opt = torch_optim.build(dict(model.named_parameters()), req["optimizer"])
    else:
        opt = torch.optim.Adam(model.parameters(), lr=req["lr"], betas=(req["beta1"], req["beta2"]), eps=req["eps"])
    logits0, losses, grads = None, [], {}
    for step in range(req["steps"]):
        opt.zero_grad()
        # "amp": "bf16" runs the forward and the loss under CPU autocast,
        # as bench/torch_train.py --amp bf16 does; parameters, gradients
        # and Adam stay f32.
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=req.get("amp") == "bf16"):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            logits0 = logits.detach().double().reshape(-1).tolist()
            grads = {n: p.grad.detach().double().reshape(-1).tolist() for n, p in model.named_parameters()}
        opt.step()
    res = {"logits": logits0, "loss": losses, "grads": grads,
           "params": {n: p.detach().double().reshape(-1).tolist() for n, p in model.named_parameters()}}
    json.dump(res, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
