#!/usr/bin/python3
"""Trains a seed model on Fashion-MNIST with PyTorch on the CPU (or, with
--device cuda, on the GPU): the peer for ngen's end-to-end training run.

--model mlp (the default) is 784 -> 512 ReLU Dropout -> 256 ReLU Dropout ->
10 (--layers and --dropout change it); --model convnet and convnet_bn are the
seed ConvNets of models/convnet (torch_models.py). All train with
cross-entropy and Adam(lr 1e-3) over shuffled
batches; the last short batch is kept, as DataLoader does by default. The
data are read from the IDX .gz files with gzip and numpy, not torchvision.
Prints one JSON line per epoch.

    /usr/bin/python3 bench/torch_train.py --epochs 5 --batch 64 --threads 1 --seed 0
    /usr/bin/python3 bench/torch_train.py --model convnet --epochs 3 --batch 64 --threads 1
    /usr/bin/python3 bench/torch_train.py --model convnet --device cuda   # the peer of cmd/train -device cuda
"""

import argparse
import gzip
import json
import os
import struct
import sys
import time

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_env  # noqa: E402
import torch_models  # noqa: E402

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An unsigned-byte IDX file, gzip or plain, as a numpy array."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if raw[:3] != b"\x00\x00\x08":
        raise SystemExit("%s: not an unsigned-byte IDX file (header %r)" % (path, raw[:4]))
    ndim = raw[3]
    dims = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(dir, train):
    prefix = "train" if train else "t10k"
    paths = [os.path.join(dir, "%s-%s-ubyte.gz" % (prefix, kind)) for kind in ("images-idx3", "labels-idx1")]
    for p in paths:
        if not os.path.exists(p):
            raise SystemExit("%s is missing; install the dataset with the README's setup command (sudo scripts/setup.sh)" % p)
    images, labels = (read_idx(p) for p in paths)
    x = images.reshape(len(images), -1).astype(np.float32) / 255
    return x, labels.astype(np.int64)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp", help="mlp, convnet or convnet_bn")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--layers", default="784,512,256,10")
    p.add_argument("--device", default="cpu", help="cpu, or cuda[:N] (exits 3 with a reason when PyTorch has no CUDA device)")
    p.add_argument("--data", default=DEFAULT_DIR, help="directory with the Fashion-MNIST IDX .gz files")
    a = p.parse_args()
    layers = [int(s) for s in a.layers.split(",")]

    torch_env.pin_threads(a.threads)  # before torch loads OpenBLAS
    import torch
    import torch.nn.functional as F

    xtr, ytr = load(a.data, True)
    xte, yte = load(a.data, False)
    if a.model == "mlp" and layers[0] != xtr.shape[1]:
        p.error("--layers starts with %d but images have %d pixels" % (layers[0], xtr.shape[1]))
    xtr, ytr, xte, yte = (torch.from_numpy(v) for v in (xtr, ytr, xte, yte))

    torch.manual_seed(a.seed)
    if a.model == "mlp":
        model = torch_models.mlp(layers, a.dropout)
    else:
        model, shape = torch_models.build(a.model)
        xtr, xte = xtr.reshape(-1, *shape), xte.reshape(-1, *shape)
    if a.device != "cpu":
        if not torch.cuda.is_available():
            print("PyTorch %s has no CUDA device" % torch.__version__, file=sys.stderr)
            sys.exit(3)
        # The whole data set fits on any GPU; batches are then sliced there,
        # as ngen's trainer copies each batch once.
        model = model.to(a.device)
        xtr, ytr, xte, yte = (v.to(a.device) for v in (xtr, ytr, xte, yte))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    shuffle = torch.Generator().manual_seed(a.seed)

    n = len(xtr)
    for epoch in range(1, a.epochs + 1):
        model.train()
        order = torch.randperm(n, generator=shuffle).to(a.device)
        total, batches = 0.0, 0
        t0 = time.perf_counter()
        for s in range(0, n, a.batch):
            idx = order[s:s + a.batch]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            total += loss.item()
            batches += 1
        secs = time.perf_counter() - t0

        model.eval()
        with torch.no_grad():
            correct = sum((model(xte[s:s + 1000]).argmax(1) == yte[s:s + 1000]).sum().item()
                          for s in range(0, len(xte), 1000))
        print(json.dumps({
            "epoch": epoch,
            "test_acc": round(correct / len(xte), 4),
            "train_loss": round(total / batches, 4),
            "samples_per_s": round(n / secs, 1),
            "epoch_s": round(secs, 3),
            "threads": torch.get_num_threads(),
            "batch": a.batch,
            "seed": a.seed,
            "model": a.model,
            "device": a.device,
        }), flush=True)


if __name__ == "__main__":
    main()
