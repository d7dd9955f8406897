#!/usr/bin/python3
"""PyTorch oracle for learning-rate schedules (runtime/schedule).

Reads one JSON request on stdin and writes one JSON result on stdout. Used
by runtime/schedule's TestRatesMatchTorch; run with /usr/bin/python3
(Debian's python3-torch 1.13).

Request: {"lr": the optimizer's rate, "steps": n, "schedules": [schedule,
...]}, each schedule as runtime/schedule.Schedule's JSON ({"kind":
"step", "step_size": 30, "gamma": 0.1}, ...).

Result: {"rates": [[rate of step 1, ..., rate of step n] per schedule]}:
the rate optimizer.step() uses at each step of the usual loop (step the
optimizer, then the scheduler), read from param_groups[0]["lr"].
"""

import json
import sys
import warnings

import torch
from torch.optim import lr_scheduler as S

warnings.simplefilter("ignore")  # SequentialLR's step(0) is "deprecated"


def scheduler(opt, s):
    k = s["kind"]
    if k == "step":
        return S.StepLR(opt, step_size=s["step_size"], gamma=s["gamma"])
    if k == "multistep":
        return S.MultiStepLR(opt, milestones=s["milestones"], gamma=s["gamma"])
    if k == "exponential":
        return S.ExponentialLR(opt, gamma=s["gamma"])
    if k == "constant":
        return S.ConstantLR(opt, factor=s["factor"], total_iters=s.get("iters", 0))
    if k == "linear":
        return S.LinearLR(opt, start_factor=s["start_factor"], end_factor=s.get("end_factor", 0.0), total_iters=s["iters"])
    if k == "cosine":
        return S.CosineAnnealingLR(opt, T_max=s["t_max"], eta_min=s.get("min", 0.0))
    if k == "onecycle":
        # Each group peaks at its own rate (ngen's groups scale the
        # schedule); a scalar max_lr would give every group the first's.
        return S.OneCycleLR(opt, max_lr=[g["lr"] for g in opt.param_groups], total_steps=s["total"],
                            pct_start=s["pct_start"], div_factor=s["div_factor"],
                            final_div_factor=s["final_div_factor"],
                            anneal_strategy="linear" if s.get("linear") else "cos",
                            three_phase=s.get("three_phase", False), cycle_momentum=False)
    if k == "warmup_cosine":
        w, total = s.get("iters", 0), s["total"]
        cos = S.CosineAnnealingLR(opt, T_max=total - w, eta_min=s.get("min", 0.0))
        if w == 0:
            return cos
        warm = S.LinearLR(opt, start_factor=s["start_factor"], end_factor=1.0, total_iters=w)
        return S.SequentialLR(opt, [warm, cos], milestones=[w])
    raise SystemExit("torch_lr.py: unknown schedule kind %r" % k)


def main():
    req = json.load(sys.stdin)
    out = []
    for s in req["schedules"]:
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=req["lr"])
        sch = scheduler(opt, s)
        rates = []
        for _ in range(req["steps"]):
            rates.append(opt.param_groups[0]["lr"])
            opt.step()
            sch.step()
        out.append(rates)
    json.dump({"rates": out}, sys.stdout)


if __name__ == "__main__":
    main()
