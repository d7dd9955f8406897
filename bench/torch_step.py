#!/usr/bin/python3
"""Times one PyTorch training step of a seed model on the CPU (or, with
--device cuda, the GPU), the peer number for ngen's benchmarks
(bench/bench_test.go, bench/gpu_test.go).

A step is forward, cross-entropy, backward, Adam(lr 1e-3) step and
zero_grad(set_to_none=True). --model mlp is Linear+ReLU layers (no ReLU after
the last) of --layers, with --dropout after each ReLU (train mode); convnet and convnet_bn are the seed ConvNets
(torch_models.py); lstmbench, gpt and transformer are the sequence models of
torch_models.seq_model, in training mode (dropout on), with their Adam rates. Inputs and labels are fixed random tensors. Prints one
JSON line.

    /usr/bin/python3 bench/torch_step.py --threads 1 --batch 128 --steps 50 --warmup 5 --layers 1024,2048,512,10
    /usr/bin/python3 bench/torch_step.py --model convnet --batch 64
    /usr/bin/python3 bench/torch_step.py --model convnet --batch 64 --device cuda
    /usr/bin/python3 bench/torch_step.py --model gpt --batch 16 --vocab 99 --seq 128 --amp bf16 --device cuda
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_env  # noqa: E402
import torch_models  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp", help="mlp (with --layers), convnet or convnet_bn")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (exits 3 with a reason when PyTorch has no CUDA device)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--layers", default="1024,2048,512,10")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dropout", type=float, default=0.0, help="--model mlp: dropout after each hidden ReLU (the seed MLP's is 0.2)")
    p.add_argument("--data", default="", help="Fashion-MNIST directory: step on its first --batch training images and labels "
                   "(what ngen's benchmark feeds) instead of random inputs")
    p.add_argument("--vocab", type=int, default=0, help="lstmbench, gpt, transformer: token ids")
    p.add_argument("--compile", default="none", choices=["none", "default", "reduce-overhead"],
                   help="torch.compile the model with this mode (reduce-overhead: CUDA graphs); the warm-up steps, "
                        "which include the compile, are timed apart (warmup_s)")
    p.add_argument("--seq", type=int, default=64, help="lstmbench, gpt, transformer: sequence length (transformer: of src and of tgt)")
    p.add_argument("--amp", default="off", choices=["off", "bf16", "fp16"],
                   help="mixed precision: the forward and the loss under torch.autocast in this type (fp16 with a "
                        "GradScaler: scale, backward, step, update), as ngen's -amp builds")
    a = p.parse_args()
    torch_env.pin_threads(a.threads)  # before torch loads OpenBLAS
    import torch
    import torch.nn.functional as F

    seq_models = ("lstmbench", "gpt", "transformer")  # torch_models.seq_model
    layers = [int(s) for s in a.layers.split(",")]
    if len(layers) < 2:
        p.error("--layers needs at least an input and an output size")

    torch.manual_seed(a.seed)
    if a.model == "mlp":
        model, shape, classes = torch_models.mlp(layers, a.dropout), [layers[0]], layers[-1]
    elif a.model in seq_models:
        model, lr = torch_models.seq_model(a.model, a.vocab)
    else:
        (model, shape), classes = torch_models.build(a.model), 10
    if a.device != "cpu":
        if not torch.cuda.is_available():
            print("PyTorch %s has no CUDA device" % torch.__version__, file=sys.stderr)
            sys.exit(3)
        model = model.to(a.device)
    opt = torch.optim.Adam(model.parameters(), lr=lr if a.model in seq_models else 1e-3)
    if a.compile != "none":
        # After the optimizer took the parameters: compile wraps the
        # module, whose parameters it shares.
        model = torch.compile(model, mode=None if a.compile == "default" else a.compile)
    if a.model in seq_models:
        # Random ids, as ngen's benchmarks draw them (bench/lstm_bench_test.go,
        # bench/transformer_bench_test.go): the kernels do not depend on the
        # values. The transformer's x is the 2T window that its forward
        # splits into src and tgt (torch_models.transformer_lm).
        g = torch.Generator().manual_seed(1)
        xt = 2 * a.seq if a.model == "transformer" else a.seq
        x = torch.randint(2, a.vocab, (a.batch, xt), generator=g)
        y = torch.randint(2, a.vocab, (a.batch, a.seq), generator=g)
        x, y = x.to(a.device), y.to(a.device)
    elif a.data:
        # Real images matter: on random normal inputs PyTorch 1.13's CPU
        # ReLU backward and max pooling run several times slower than on
        # images (measured here), which would flatter ngen.
        from torch_train import load
        xs, ys = load(a.data, True)
        x = torch.from_numpy(xs[:a.batch].copy()).reshape(a.batch, *shape).to(a.device)
        y = torch.from_numpy(ys[:a.batch].copy()).to(a.device)
    else:
        x = torch.randn(a.batch, *shape).to(a.device)
        y = torch.randint(0, classes, (a.batch,)).to(a.device)
    sync = torch.cuda.synchronize if a.device != "cpu" else (lambda: None)
    dev_type = "cuda" if a.device.startswith("cuda") else "cpu"
    if a.amp == "fp16" and dev_type == "cpu":
        p.error("--amp fp16: PyTorch %s's CPU autocast has no float16" % torch.__version__)
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)
    scaler = None
    if a.amp == "fp16":  # torch.amp.GradScaler("cuda") from PyTorch 2.3, torch.cuda.amp's before
        scaler = torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()

    def step():
        with torch.autocast(device_type=dev_type, dtype=half) if half else contextlib.nullcontext():
            out = model(x)
            loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    sync()
    w0 = time.perf_counter()
    for _ in range(max(a.warmup, 1 if a.compile == "none" else 3)):
        step()
    sync()
    warmup_s = time.perf_counter() - w0
    times = []
    for _ in range(a.steps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)

    print(json.dumps({
        "ms_per_step": round(1e3 * sum(times) / len(times), 4),
        "ms_median": round(1e3 * statistics.median(times), 4),
        "ms_min": round(1e3 * min(times), 4),
        "threads": torch.get_num_threads(),
        "batch": a.batch,
        "model": a.model,
        "device": a.device,
        "gpu": torch.cuda.get_device_name(torch.device(a.device)) if a.device != "cpu" else None,
        "layers": layers if a.model == "mlp" else None,
        "steps": a.steps,
        "warmup": a.warmup,
        "warmup_s": round(warmup_s, 3),
        "compile": a.compile,
        "amp": a.amp,
        "torch": torch.__version__,
        "blas": torch_env.blas_summary(),
        "cpu": torch_env.cpu_model(),
    }))


if __name__ == "__main__":
    main()
