"""The torch.optim optimizer for ir.Optimizer's JSON, with its parameter
groups: imported by the oracle scripts beside it (torch_mlp.py,
torch_lm.py).

o is ir.Optimizer's JSON ("kind", "lr", "momentum", "dampening",
"nesterov", "weight_decay", "beta1", "beta2", "eps", "groups"); each of
its "groups" lists its members by name ("params", which the Go test fills
in from the plan) and its resolved options ("lr_scale", "weight_decay"
with "own_decay", "beta1", "beta2", "momentum"). A group without its own
decay takes o's "weight_decay", as ngen's run-time decay does; the
parameters no group lists form the last group, with o's options. Each
group's rate is o's "lr" times its "lr_scale", so a scheduler scales
every group's rate by the same factor, as ngen's schedule does.
"""

import torch


def build(named, o):
    kind = o["kind"]
    wd = o.get("weight_decay", 0)
    groups, taken = [], set()
    for g in o.get("groups") or []:
        taken.update(g["params"])
        d = {"params": [named[n] for n in g["params"]], "lr": o["lr"] * g.get("lr_scale", 1),
             "weight_decay": g.get("weight_decay", 0) if g.get("own_decay") else wd}
        if kind == "sgd":
            d["momentum"] = g.get("momentum", 0)
        else:
            d["betas"] = (g["beta1"], g["beta2"])
        groups.append(d)
    rest = [t for n, t in named.items() if n not in taken]
    if rest:
        groups.append({"params": rest})
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=o["lr"], momentum=o.get("momentum", 0), dampening=o.get("dampening", 0),
                               weight_decay=wd, nesterov=o.get("nesterov", False))
    if kind in ("adam", "adamw"):
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        return cls(groups, lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], weight_decay=wd)
    raise SystemExit("torch_optim.py: unknown optimizer %r" % kind)
