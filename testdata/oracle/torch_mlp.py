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
as ngen's kernels do. "amp": "bf16" (optional) runs the forward pass and
the loss under torch.autocast(device_type="cpu", dtype=torch.bfloat16).
"amp": "f16" emulates autocast in float16, which PyTorch 1.13 lacks on
the CPU: each GEMM's operands and result, and the bias add, are rounded
to float16 with .half().float(), whose backward rounds the gradient to
float16 as the cast's gradient does (products of float16 are exact in
f32, so an f32 GEMM of rounded operands is cublasGemmEx's). "scaler"
(optional: init_scale, growth_factor, backoff_factor, growth_interval)
emulates torch.cuda.amp.GradScaler, which 1.13 lacks on the CPU too
(_amp_update_scale_ and _amp_foreach_non_finite_check_and_unscale_ have
no CPU kernels): the loss times the f32 scale is backpropagated, the
gradients are multiplied by float32(1/scale) and checked, a step with an
inf or NaN is skipped, and the scale follows _amp_update_scale_'s
formula; a skipped step steps the schedule (not the optimizer), as a
loop calling scheduler.step() after scaler.step does. With a scaler the
result adds "scales" (each step's scale),
"skipped" (each step's verdict), and "grads" are the scaled gradients
of the first step not skipped.

Result: {"loss": [loss of each step], "grads": {name: gradient at step 1},
"params": {name: value after all steps}}.
"""

import contextlib
import json
import sys

import torch
import torch.nn.functional as F

import torch_lr  # the schedules, beside this script
import torch_optim  # the optimizer and its parameter groups, beside it

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
    o = req["optimizer"]  # ir.Optimizer's JSON
    ps = list(params.values())
    opt = torch_optim.build(params, o)
    sched = torch_lr.scheduler(opt, o["schedule"]) if o.get("schedule") else None
    # "amp": "bf16" runs the forward pass and the loss under CPU autocast
    # (ngen's dsl.AMP{Type: dsl.BF16}); the parameters and the optimizer
    # stay f32, as in ngen.
    if req.get("amp") == "bf16":
        def autocast():
            return torch.autocast(device_type="cpu", dtype=torch.bfloat16)
    else:
        autocast = contextlib.nullcontext
    f16 = req.get("amp") == "f16"

    def r16(t):
        return t.half().float() if f16 else t

    sc = req.get("scaler")
    lscale = torch.tensor(sc["init_scale"], dtype=torch.float32) if sc else None
    tracker = 0
    losses, grads, scales, skipped = [], {}, [], []
    for step in range(req["steps"]):
        opt.zero_grad()
        with autocast():
            h = x
            for i, name in enumerate(layers):
                w, b = params[name + ".weight"], params[name + ".bias"]
                if f16:
                    h = r16(r16(r16(h) @ r16(w).t()) + r16(b))
                else:
                    h = F.linear(h, w, b)
                if i < len(layers) - 1:
                    h = torch.relu(h)
                    if p > 0:
                        m = torch.tensor(req["masks"][step][i], dtype=dt).reshape(h.shape)
                        h = h * (m * scale)
            loss = F.cross_entropy(h, y)
        if sc:
            (loss * lscale).backward()
            scales.append(lscale.item())
            inv = torch.tensor(1.0 / lscale.double().item(), dtype=torch.float32)
            found_inf = any(not torch.isfinite(t.grad).all() for t in ps)
            skipped.append(bool(found_inf))
            if not found_inf and not grads:
                grads = {n: t.grad.detach().double().reshape(-1).tolist() for n, t in params.items()}
            for t in ps:
                t.grad.mul_(inv)
        else:
            loss.backward()
        losses.append(loss.item())
        if step == 0 and not sc:
            grads = {n: t.grad.detach().double().reshape(-1).tolist() for n, t in params.items()}
        if sc and found_inf:
            # _amp_update_scale_: float * double, stored as float.
            lscale = torch.tensor(lscale.item() * sc["backoff_factor"], dtype=torch.float32)
            tracker = 0
            # scaler.step skipped opt.step (Adam's step count stays); the
            # loop steps the scheduler all the same.
            if sched is not None:
                sched.step()
            continue
        if sc:
            tracker += 1
            if tracker == sc["growth_interval"]:
                g = torch.tensor(lscale.item() * sc["growth_factor"], dtype=torch.float32)
                if torch.isfinite(g):
                    lscale = g
                tracker = 0
        if o.get("clip_value"):
            torch.nn.utils.clip_grad_value_(ps, o["clip_value"])
        clip_norm = req["clip_norms"][step] if req.get("clip_norms") else o.get("clip_norm")
        if clip_norm:
            torch.nn.utils.clip_grad_norm_(ps, clip_norm)
        opt.step()
        if sched is not None:
            sched.step()
    out = {"loss": losses, "grads": grads, "scales": scales, "skipped": skipped,
           "params": {n: t.detach().double().reshape(-1).tolist() for n, t in params.items()}}
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
