#!/usr/bin/python3
"""PyTorch oracle for the Transformer layers: torch.nn.TransformerEncoderLayer,
torch.nn.TransformerDecoderLayer and torch.nn.Transformer (batch_first,
dropout 0), loaded with the given state_dict (strict, so the names and
shapes must be PyTorch's), trained with torch.optim.Adam on the loss
sum(output * g).

Request (JSON on stdin): {"dtype": "f32"|"f64", "module": "encoder_layer" |
"decoder_layer" | "transformer", "d_model", "nhead", "dim_ff", "num_enc",
"num_dec", "activation", "norm_first", "src", "tgt", "g" (tensors
{"shape", "data"}), "src_kpm", "memory_kpm" (0/1 lists [B, Ts] or null),
"tgt_causal", "src_causal" (bools), "params" {state_dict name: tensor},
"steps", "lr", "beta1", "beta2", "eps"}.

Result: {"output": first forward output (flat), "loss": [per step],
"grads": {name: gradient at step 1}, "params": {name: after all steps}}.
Used by dsl/transformer_oracle_test.go.
"""

import json
import sys

import torch
import torch.nn as nn

torch.set_num_threads(1)

FLOAT = {"f32": torch.float32, "f64": torch.float64}


def main():
    req = json.load(sys.stdin)
    dt = FLOAT[req["dtype"]]

    def tensor(t):
        return torch.tensor(t["data"], dtype=dt).reshape(t["shape"])

    def kpm(name):
        m = req.get(name)
        return None if m is None else torch.tensor(m, dtype=torch.bool)

    d, h, ff = req["d_model"], req["nhead"], req["dim_ff"]
    common = dict(dim_feedforward=ff, dropout=0.0, activation=req["activation"], batch_first=True,
                  norm_first=req["norm_first"], dtype=dt)
    kind = req["module"]
    if kind == "encoder_layer":
        mod = nn.TransformerEncoderLayer(d, h, **common)
    elif kind == "decoder_layer":
        mod = nn.TransformerDecoderLayer(d, h, **common)
    else:
        mod = nn.Transformer(d, h, req["num_enc"], req["num_dec"], **common)
    mod.load_state_dict({n: tensor(t) for n, t in req["params"].items()}, strict=True)
    src, tgt, g = tensor(req["src"]), tensor(req["tgt"]), tensor(req["g"])

    def causal(n):
        return torch.ones(n, n, dtype=torch.bool).triu(1)

    def forward():
        if kind == "encoder_layer":
            m = causal(src.shape[1]) if req["src_causal"] else None
            return mod(src, src_mask=m, src_key_padding_mask=kpm("src_kpm"))
        tm = causal(tgt.shape[1]) if req["tgt_causal"] else None
        if kind == "decoder_layer":
            return mod(tgt, src, tgt_mask=tm, memory_key_padding_mask=kpm("memory_kpm"))
        sm = causal(src.shape[1]) if req["src_causal"] else None
        return mod(src, tgt, src_mask=sm, tgt_mask=tm, src_key_padding_mask=kpm("src_kpm"),
                   memory_key_padding_mask=kpm("memory_kpm"))

    opt = torch.optim.Adam(mod.parameters(), lr=req["lr"], betas=(req["beta1"], req["beta2"]), eps=req["eps"])
    out0, losses, grads = None, [], {}
    for step in range(req["steps"]):
        opt.zero_grad()
        out = forward()
        loss = (out * g).sum()
        loss.backward()
        losses.append(loss.item())
        if step == 0:
            out0 = out.detach().double().reshape(-1).tolist()
            grads = {n: p.grad.detach().double().reshape(-1).tolist() for n, p in mod.named_parameters()}
        opt.step()
    res = {"output": out0, "loss": losses, "grads": grads,
           "params": {n: p.detach().double().reshape(-1).tolist() for n, p in mod.named_parameters()}}
    json.dump(res, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
