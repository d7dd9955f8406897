"""The training loop of the whole-model oracles (torch_mlp.py,
torch_convnet_amp.py): imported by the scripts beside it.

train(req, params, forward) takes req["steps"] steps on the f32 master
weights params ({name: leaf tensor}), calling forward(step, r16) for each
step's loss, where r16 rounds a tensor to float16 and back under the
f16 emulation below (the identity otherwise). The loop follows the
request's fields as torch_mlp.py documents them: "optimizer" (with its
"schedule", "clip_value" and "clip_norm"), "clip_norms", "amp" and
"scaler".

"amp": "bf16" runs forward (the forward pass and the loss) under
torch.autocast(device_type="cpu", dtype=torch.bfloat16); the parameters
and the optimizer stay f32, as in ngen. "amp": "f16" emulates autocast in
float16, which PyTorch 1.13 lacks on the CPU: forward rounds each GEMM's
or convolution's operands and result, and the bias add, with r16
(.half().float(), whose backward rounds the gradient to float16 as the
cast's gradient does; products of float16 are exact in f32, so an f32
GEMM of rounded operands is cublasGemmEx's), and a Linear's weight with
weight16 (rounded forward, its gradient left in f32: ngen writes a
Linear weight's gradient GEMM in f32, compiler/f32_weight_grads.go). "scaler" (init_scale,
growth_factor, backoff_factor, growth_interval) emulates
torch.cuda.amp.GradScaler, which 1.13 lacks on the CPU too
(_amp_update_scale_ and _amp_foreach_non_finite_check_and_unscale_ have
no CPU kernels): the loss times the f32 scale is backpropagated, the
gradients are multiplied by float32(1/scale) and checked, a step with an
inf or NaN is skipped, and the scale follows _amp_update_scale_'s
formula; a skipped step steps the schedule (not the optimizer), as a
loop calling scheduler.step() after scaler.step does.

Result: {"loss": [each step's loss], "grads": {name: gradient at step 1,
or with a scaler the scaled gradients of the first step not skipped},
"scales": [each step's scale], "skipped": [each step's verdict],
"params": {name: value after all steps}}.
"""

import contextlib

import torch

import torch_lr  # the schedules, beside this script
import torch_optim  # the optimizer and its parameter groups, beside it


class _Weight16(torch.autograd.Function):
    """A weight rounded to float16 forward, its gradient unrounded."""

    @staticmethod
    def forward(ctx, t):
        return t.half().float()

    @staticmethod
    def backward(ctx, g):
        return g


def weight16(t):
    return _Weight16.apply(t)


def flat(t):
    return t.detach().double().reshape(-1).tolist()


def train(req, params, forward):
    o = req["optimizer"]  # ir.Optimizer's JSON
    ps = list(params.values())
    opt = torch_optim.build(params, o)
    sched = torch_lr.scheduler(opt, o["schedule"]) if o.get("schedule") else None
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
            loss = forward(step, r16)
        if sc:
            (loss * lscale).backward()
            scales.append(lscale.item())
            inv = torch.tensor(1.0 / lscale.double().item(), dtype=torch.float32)
            found_inf = any(not torch.isfinite(t.grad).all() for t in ps)
            skipped.append(bool(found_inf))
            if not found_inf and not grads:
                grads = {n: flat(t.grad) for n, t in params.items()}
            for t in ps:
                t.grad.mul_(inv)
        else:
            loss.backward()
        losses.append(loss.item())
        if step == 0 and not sc:
            grads = {n: flat(t.grad) for n, t in params.items()}
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
    return {"loss": losses, "grads": grads, "scales": scales, "skipped": skipped,
            "params": {n: flat(t) for n, t in params.items()}}
