#!/usr/bin/python3
"""Times one PyTorch CPU training step of an MLP, the peer number for ngen's
MLP benchmark.

A step is forward, cross-entropy, backward, Adam(lr 1e-3) step and
zero_grad(set_to_none=True), on Linear+ReLU layers (no ReLU after the last).
Inputs and labels are fixed random tensors. Prints one JSON line.

    /usr/bin/python3 bench/torch_mlp.py --threads 1 --batch 128 --steps 50 --warmup 5 --layers 1024,2048,512,10
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_env  # noqa: E402


def mlp(layers):
    import torch.nn as nn
    mods = []
    for i in range(len(layers) - 1):
        mods.append(nn.Linear(layers[i], layers[i + 1]))
        if i < len(layers) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--layers", default="1024,2048,512,10")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch_env.pin_threads(a.threads)  # before torch loads OpenBLAS
    import torch
    import torch.nn.functional as F

    layers = [int(s) for s in a.layers.split(",")]
    if len(layers) < 2:
        p.error("--layers needs at least an input and an output size")

    torch.manual_seed(a.seed)
    model = mlp(layers)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(a.batch, layers[0])
    y = torch.randint(0, layers[-1], (a.batch,))

    def step():
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)

    print(json.dumps({
        "ms_per_step": round(1e3 * sum(times) / len(times), 4),
        "ms_median": round(1e3 * statistics.median(times), 4),
        "ms_min": round(1e3 * min(times), 4),
        "threads": torch.get_num_threads(),
        "batch": a.batch,
        "layers": layers,
        "steps": a.steps,
        "warmup": a.warmup,
        "torch": torch.__version__,
        "blas": torch_env.blas_summary(),
        "cpu": torch_env.cpu_model(),
    }))


if __name__ == "__main__":
    main()
