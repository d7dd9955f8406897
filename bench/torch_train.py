#!/usr/bin/python3
"""Trains a seed model on Fashion-MNIST with PyTorch on the CPU (or, with
--device cuda, on the GPU): the peer for ngen's end-to-end training run.

--model mlp (the default) is 784 -> 512 ReLU Dropout -> 256 ReLU Dropout ->
10 (--layers and --dropout change it); --model convnet and convnet_bn are the
seed ConvNets of models/convnet (torch_models.py). All train with
cross-entropy and Adam(lr 1e-3, or --lr, with --schedule's learning-rate
schedule, --weight-decay, and clip_grad_norm_ at --clip before each step)
over shuffled batches; the last short batch is kept, as DataLoader does by default. The
data are read from the IDX .gz files with gzip and numpy, not torchvision.
Prints one JSON line per epoch.

    /usr/bin/python3 bench/torch_train.py --epochs 5 --batch 64 --threads 1 --seed 0
    /usr/bin/python3 bench/torch_train.py --model convnet --epochs 3 --batch 64 --threads 1
    /usr/bin/python3 bench/torch_train.py --model convnet --device cuda   # the peer of cmd/train -device cuda

--model rnn, lstm, gpt and transformer are the sequence models
(torch_models.seq_model); they read the sequences that cmd/train -torch writes (--seqdata, the format of
cmd/train/seq_torch.go's writeSeqSets) and print validation accuracy (rnn,
and test accuracy) or validation bits per character (the others) per epoch.

--amp bf16 runs the forward pass and the loss under
torch.autocast(dtype=torch.bfloat16) on the device, the peer of cmd/train
-amp bf16 (master weights, gradients and Adam stay f32, as ngen's AMP
does); evaluation runs under it too. --amp fp16 is refused on the CPU:
PyTorch 1.13's CPU autocast has no float16.

--log PATH writes the run log of cmd/train -log (package runlog): a run
line, then a line per training step and per evaluation, each written and
flushed as it happens; cmd/train -torch -plot draws it beside ngen's run.
"""

import argparse
import gzip
import json
import os
import struct
import sys
import time

# numpy is imported in main, after torch_env.pin_threads: it loads
# OpenBLAS too, which fixes its thread count when it loads. Functions that
# other scripts import (load: torch_step.py --data) call numpy() instead,
# after their own caller has pinned the threads.
np = None

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_env  # noqa: E402
import torch_models  # noqa: E402

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def numpy():
    """The numpy module, imported on first use (see np above)."""
    global np
    if np is None:
        import numpy as np
    return np


def read_idx(path):
    """An unsigned-byte IDX file, gzip or plain, as a numpy array."""
    np = numpy()
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
    np = numpy()
    prefix = "train" if train else "t10k"
    paths = [os.path.join(dir, "%s-%s-ubyte.gz" % (prefix, kind)) for kind in ("images-idx3", "labels-idx1")]
    for p in paths:
        if not os.path.exists(p):
            raise SystemExit("%s is missing; install the dataset with the README's setup command (sudo scripts/setup.sh)" % p)
    images, labels = (read_idx(p) for p in paths)
    x = images.reshape(len(images), -1).astype(np.float32) / 255
    return x, labels.astype(np.int64)


class RunLog:
    """--log: the JSON-lines run log that cmd/train -log writes (runlog)."""

    def __init__(self, path, model, device, batch):
        self.f = open(path, "w") if path else None
        self.t0 = self.last = time.perf_counter()
        self.step = 0
        self.device = device
        self.write({"kind": "run", "framework": "pytorch", "model": model, "device": device, "batch": batch})

    def write(self, rec):
        if self.f:
            self.f.write(json.dumps(rec) + "\n")
            self.f.flush()

    def epoch_start(self):
        self.last = time.perf_counter()

    def step_done(self, epoch, loss, rows, lr):
        if not self.f:
            return
        import torch
        now = time.perf_counter()
        self.step += 1
        alloc = peak = 0
        if self.device != "cpu":
            alloc, peak = torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()
        self.write({"kind": "step", "step": self.step, "epoch": epoch, "loss": loss, "lr": lr,
                    "samples_per_s": rows / max(now - self.last, 1e-9), "mem_allocated": alloc, "mem_peak": peak,
                    "time_s": now - self.t0})
        self.last = now

    def eval_done(self, epoch, train_loss, samples_per_s, **metrics):
        rec = {"kind": "eval", "step": self.step, "epoch": epoch, "train_loss": train_loss,
               "samples_per_s": samples_per_s, "time_s": time.perf_counter() - self.t0}
        rec.update(metrics)
        self.write(rec)


def lr_schedule(opt, spec):
    """The torch scheduler of a runtime/schedule JSON, or None: built by
    testdata/oracle/torch_lr.py, the builder the schedule tests compare
    ngen's rates with."""
    if not spec:
        return None
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "oracle"))
    import torch_lr
    return torch_lr.scheduler(opt, json.loads(spec))


def adam(model, a, lr):
    """torch.optim.Adam over the model's parameters; with --groups, in the
    model's parameter groups, built by testdata/oracle/torch_optim.py
    (the builder the optimizer oracle tests use). --groups names ngen's
    parameters; --param-names lists them in the model's order, which the
    PyTorch model's parameters() follow (Linear, conv and norm layers in
    declaration order, weight before bias)."""
    import torch
    if not a.groups:
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=a.weight_decay)
    names, params = (a.param_names or "").split(","), list(model.parameters())
    if len(names) != len(params):
        sys.exit("torch_train.py: --param-names lists %d parameters, the PyTorch %s has %d" % (len(names), a.model, len(params)))
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "oracle"))
    import torch_optim
    o = {"kind": "adam", "lr": lr, "weight_decay": a.weight_decay, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
         "groups": json.loads(a.groups)}
    return torch_optim.build(dict(zip(names, params)), o)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp", help="mlp, convnet or convnet_bn")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--epoch-steps", type=int, default=0,
                   help="sequence models: train each epoch on its first N shuffled batches only (0: all), as cmd/train -epoch-steps")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dropout", type=float, default=0.2)
    p.add_argument("--layers", default="784,512,256,10")
    p.add_argument("--device", default="cpu", help="cpu, or cuda[:N] (exits 3 with a reason when PyTorch has no CUDA device)")
    p.add_argument("--data", default=DEFAULT_DIR, help="directory with the Fashion-MNIST IDX .gz files")
    p.add_argument("--seqdata", help="sequence models: the file cmd/train -torch writes")
    p.add_argument("--vocab", type=int, help="sequence models: token ids")
    p.add_argument("--log", help="write the run log (cmd/train -log's JSON lines) here")
    p.add_argument("--amp", choices=["off", "bf16", "fp16"], default="off",
                   help="bf16 runs the forward pass and the loss under torch.autocast, as cmd/train -amp bf16 (fp16 is refused)")
    p.add_argument("--lr", type=float, help="Adam's learning rate (default: the model's), the schedule's base rate")
    p.add_argument("--weight-decay", type=float, default=0,
                   help="Adam's weight_decay (cmd/train passes -weight-decay, or the model's)")
    p.add_argument("--clip", type=float, default=0,
                   help="clip the gradients to this global norm before each step, torch.nn.utils.clip_grad_norm_ (0: no clipping; cmd/train passes -clip, the model's recipe's, or the model's)")
    p.add_argument("--groups", help="parameter groups as ngen's checkpoints hold them (runtime.GroupsJSON: members by ngen name, "
                   "resolved options); cmd/train passes the model's")
    p.add_argument("--param-names", help="with --groups: ngen's parameter names in the model's order, paired with parameters()")
    p.add_argument("--schedule", help="learning-rate schedule as runtime/schedule's JSON (cmd/train -schedule passes it), "
                   "stepped after every optimizer step")
    a = p.parse_args()
    torch_env.pin_threads(a.threads)  # before numpy or torch loads OpenBLAS
    numpy()
    if a.model in ("rnn", "lstm", "gpt", "transformer"):
        return train_seq(a)
    layers = [int(s) for s in a.layers.split(",")]

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
    if a.amp == "fp16":
        # PyTorch 1.13's CPU autocast has no float16, and on CUDA it would
        # need GradScaler's loop, which this peer does not run.
        sys.exit("torch_train.py: --amp fp16 is not run by this peer (PyTorch %s's CPU autocast has no float16); use --amp bf16" % torch.__version__)

    def autocast():
        return torch.autocast(device_type=a.device.split(":")[0], dtype=torch.bfloat16, enabled=a.amp == "bf16")

    opt = adam(model, a, a.lr or 1e-3)
    sched = lr_schedule(opt, a.schedule)
    shuffle = torch.Generator().manual_seed(a.seed)
    log = RunLog(a.log, a.model, a.device, a.batch)

    n = len(xtr)
    for epoch in range(1, a.epochs + 1):
        model.train()
        order = torch.randperm(n, generator=shuffle).to(a.device)
        total, batches = 0.0, 0
        t0 = time.perf_counter()
        log.epoch_start()
        for s in range(0, n, a.batch):
            if a.epoch_steps > 0 and batches == a.epoch_steps:
                break
            idx = order[s:s + a.batch]
            with autocast():
                loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            loss.backward()
            if a.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            opt.step()
            if sched is not None:
                sched.step()
            opt.zero_grad(set_to_none=True)
            value = loss.item()
            total += value
            batches += 1
            log.step_done(epoch, value, len(idx), opt.param_groups[0]["lr"])
        secs = time.perf_counter() - t0

        model.eval()
        with torch.no_grad(), autocast():
            correct = sum((model(xte[s:s + 1000]).argmax(1) == yte[s:s + 1000]).sum().item()
                          for s in range(0, len(xte), 1000))
        log.eval_done(epoch, total / batches, n / secs, test_acc=correct / len(xte))
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


def read_seqdata(path):
    """The splits of writeSeqSets: (X, Y, Len or None) per split, or None
    for a missing split."""
    raw = np.fromfile(path, dtype="<i4")
    out, at = [], 0
    for _ in range(3):
        n, t, yper, has_len = (int(v) for v in raw[at:at + 4])
        at += 4
        x = raw[at:at + n * t].reshape(n, t)
        at += n * t
        y = raw[at:at + n * yper].reshape(n, yper)
        at += n * yper
        ln = None
        if has_len:
            ln = raw[at:at + n]
            at += n
        out.append((x, y, ln) if n > 0 else None)
    return out


def train_seq(a):
    import math
    import torch
    import torch.nn.functional as F

    splits = []
    for s in read_seqdata(a.seqdata):
        if s is None:
            splits.append(None)
            continue
        x, y, ln = s
        ln = np.full(len(x), x.shape[1]) if ln is None else ln
        splits.append(tuple(torch.from_numpy(v.astype(np.int64)) for v in (x, y, ln)))
    (xtr, ytr, ltr), val, test = splits
    per_seq = ytr.shape[1] == 1
    if a.amp == "fp16":
        sys.exit("torch_train.py: --amp fp16 is not run by this peer (PyTorch %s's CPU autocast has no float16); use --amp bf16" % torch.__version__)

    def autocast():
        # As for the image models: the forward pass and the loss, and
        # evaluation, under CPU autocast in bf16 (nn.RNN and nn.LSTM stay
        # f32 there, the Linear layers and attention's GEMMs run in bf16).
        return torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=a.amp == "bf16")

    torch.manual_seed(a.seed)
    model, lr = torch_models.seq_model(a.model, a.vocab)
    opt = adam(model, a, a.lr or lr)
    sched = lr_schedule(opt, a.schedule)
    shuffle = torch.Generator().manual_seed(a.seed)
    log = RunLog(a.log, a.model, a.device, a.batch)

    def loss_of(logits, y):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    def evaluate(split):
        x, y, ln = split
        nll, correct = 0.0, 0
        with torch.no_grad(), autocast():
            for s in range(0, len(x), 1000):
                out = model(x[s:s + 1000], ln[s:s + 1000])
                logits = out.reshape(-1, out.shape[-1])
                t = y[s:s + 1000].reshape(-1)
                nll += F.cross_entropy(logits.double(), t, reduction="sum").item()
                correct += (logits.argmax(1) == t).sum().item()
        return nll / y.numel(), correct / y.numel()

    n = len(xtr)
    for epoch in range(1, a.epochs + 1):
        model.train()
        order = torch.randperm(n, generator=shuffle)
        total, batches = 0.0, 0
        t0 = time.perf_counter()
        log.epoch_start()
        for s in range(0, n, a.batch):
            if a.epoch_steps > 0 and batches == a.epoch_steps:
                break
            idx = order[s:s + a.batch]
            with autocast():
                loss = loss_of(model(xtr[idx], ltr[idx]), ytr[idx])
            loss.backward()
            if a.clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
            opt.step()
            if sched is not None:
                sched.step()
            opt.zero_grad(set_to_none=True)
            value = loss.item()
            total += value
            batches += 1
            log.step_done(epoch, value, len(idx), opt.param_groups[0]["lr"])
        secs = time.perf_counter() - t0
        model.eval()
        vloss, vacc = evaluate(val)
        r = {"epoch": epoch, "train_loss": round(total / batches, 4), "samples_per_s": round(min(n, batches * a.batch) / secs, 1),
             "epoch_s": round(secs, 3), "threads": torch.get_num_threads(), "batch": a.batch, "seed": a.seed, "model": a.model,
             "steps": batches}
        if per_seq:
            r["val_acc"] = round(vacc, 4)
            log.eval_done(epoch, total / batches, r["samples_per_s"], val_acc=vacc)
            if epoch == a.epochs and test is not None:
                r["test_acc"] = round(evaluate(test)[1], 4)
                log.eval_done(epoch, total / batches, r["samples_per_s"], test_acc=r["test_acc"])
        else:
            r["val_bpc"] = round(vloss / math.log(2), 4)
            log.eval_done(epoch, total / batches, r["samples_per_s"], val_bpc=vloss / math.log(2))
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
