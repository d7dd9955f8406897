#!/usr/bin/python3
"""PyTorch oracle for fuzzgen's random models (compiler/fuzzgen).

Each model is a list of nodes, one DSL call each (fuzzgen's Spec; the
meaning of a node's ints, k, f and str is its op's row in compiler/fuzzgen
ops_*.go). This script computes every node with torch, from the
parameters and state ngen initialised, trains with the torch optimizer for
the given steps and reports what ngen's differential runner compares.

Request (JSON on stdin): {"dtype": "f32"|"f64", "steps", "batch",
"opt": ngen's lowered optimizer (ir.Optimizer: "kind", "lr",
"momentum", "dampening", "nesterov", "weight_decay", "beta1", "beta2",
"eps"),
"specs": [{"spec": fuzzgen Spec, "prefix": the spec's name prefix,
"params" and "states": {full name: {"shape", "data"}}, "inputs": per
step {input name: flat values}, "masks": per step {node index: flat 0/1
dropout keep mask}}]}.

Result: one entry per spec: {"loss": [per step], "grads": {name: step 1
gradient}, "params": {name: after the steps}, "states": {name: after the
steps}, "output": the output node, eval mode, after the steps, on step 1's
inputs, "shapes": per node, the shape of each result in step 1}.
Dropout is applied with the given masks (ngen's Philox draws, computed by
fuzzgen.DropoutMask), scaled by 1/(1-p). A query or softmax row whose every
key is masked is zeros, as in ngen (PyTorch's is NaN).
"""

import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

FLOAT = {"f32": torch.float32, "f64": torch.float64}


class Ctx:
    """One forward pass: the spec, its parameters and state, the step's
    inputs and dropout masks, training mode."""

    def __init__(self, req, spec, P, S, inputs, masks, train):
        self.dt = FLOAT[req["dtype"]]
        self.batch = req["batch"]
        self.spec = spec["spec"]
        self.prefix = spec["prefix"]
        self.P, self.S = P, S
        self.inputs, self.masks = inputs, masks
        self.train = train
        self.index = 0  # the node being computed

    def param(self, name):
        return self.P[self.prefix + name]

    def shape(self, dims):
        return [self.batch if d == -1 else d for d in dims]

    def dropout(self, x, p):
        if not self.train or p == 0:
            return x
        m = torch.tensor(self.masks[str(self.index)], dtype=x.dtype).reshape(x.shape)
        return x * m / (1 - p)


def ints(n):
    return n.get("ints") or []


def bit(n, i):
    v = ints(n)
    return i < len(v) and v[i] != 0


def _input(c, n):
    v = c.inputs[n["name"]]
    t = torch.tensor(v, dtype=c.dt if n["op"] == "input" else torch.int64)
    return t.reshape(c.shape(ints(n)))


def _reduce(fn):
    def op(c, n, x):
        axes = n.get("ints")
        if axes is None:
            axes = list(range(x.dim()))
        return fn(x, dim=list(axes), keepdim=n.get("str") == "keep")
    return op


def _matmul(c, n, a, b):
    if bit(n, 0):
        a = a.transpose(-1, -2)
    if bit(n, 1):
        b = b.transpose(-1, -2)
    return torch.matmul(a, b)


def _linear(c, n, x):
    b = None if n.get("str") == "nobias" else c.param(n["name"] + ".bias")
    return F.linear(x, c.param(n["name"] + ".weight"), b)


def _conv2d(c, n, x):
    out, k, s, p, d, g = ints(n)
    b = None if n.get("str") == "nobias" else c.param(n["name"] + ".bias")
    return F.conv2d(x, c.param(n["name"] + ".weight"), b, stride=s or 1, padding=p, dilation=d or 1, groups=g or 1)


def _maxpool(c, n, x):
    k, s, p, d = ints(n)
    return F.max_pool2d(x, k, stride=s or k, padding=p, dilation=d or 1)


def _avgpool(c, n, x):
    k, s, p = ints(n)
    return F.avg_pool2d(x, k, stride=s or k, padding=p, count_include_pad=True)


def _batchnorm(c, n, x):
    name = c.prefix + n["name"]
    return F.batch_norm(x, c.S[name + ".running_mean"], c.S[name + ".running_var"],
                        c.P[name + ".weight"], c.P[name + ".bias"], training=c.train,
                        momentum=n.get("f") or 0.1, eps=1e-5)


def _cross_entropy(c, n, logits, labels):
    k = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, k), labels.reshape(-1), reduction="mean")


class _ContiguousGrad(torch.autograd.Function):
    """The identity, whose backward hands on a contiguous gradient.

    PyTorch 1.13's CPU GELU backward is wrong when the incoming gradient
    is not contiguous (a permute or transpose after the GELU): it mixes up
    elements (fuzz_312: GELU, permute, mean gave the LayerNorm before it
    gradients of 1e-38 and 695). A contiguous copy of the same values
    gives the right answer, so the oracle's GELU is followed by this."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g.contiguous()


def _shifted_layer_norm(x, shape, weight=None, bias=None, eps=1e-5):
    """torch.nn.functional.layer_norm over the last axis, composed of
    torch ops on the row shifted by its first element, so that a constant
    row normalises to exactly 0 (then the bias) as ngen's kernel computes
    it. PyTorch 1.13's CPU kernel computes x·rstd − mean·rstd with a fused
    multiply-add, whose rounding error (1e-17 in f64, 1e-6 in f32, times
    1/√eps) a ReLU after the norm turns into a gradient of 0 or 1 at
    random (fuzz_506, fuzz_553: a convolution's padding made whole rows
    constant). Elsewhere the two agree to rounding."""
    assert len(shape) == 1 and shape[0] == x.shape[-1]
    d = x - x[..., :1].detach()
    md = d.mean(-1, keepdim=True)
    c = d - md
    var = (c * c).mean(-1, keepdim=True)
    y = c * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def _layernorm(c, n, x):
    return _shifted_layer_norm(x, [x.shape[-1]], c.param(n["name"] + ".weight"), c.param(n["name"] + ".bias"),
                               n.get("f") or 1e-5)


def _masked_softmax(c, n, x, kpm=None):
    """ngen's MaskedSoftmax: causal masks j > i (i the second-to-last
    coordinate), kpm [N, L] masks where non-zero; a fully masked row is
    zeros (computed unmasked, then replaced, so no NaN reaches the
    gradient)."""
    if n.get("str") != "causal" and kpm is None:
        return torch.softmax(x, -1)
    mask = torch.zeros(x.shape, dtype=torch.bool)
    if n.get("str") == "causal":
        q, k = x.shape[-2], x.shape[-1]
        mask = mask | torch.ones(q, k, dtype=torch.bool).triu(1)
    if kpm is not None:
        shape = [x.shape[0]] + [1] * (x.dim() - 2) + [x.shape[-1]]
        mask = mask | (kpm != 0).reshape(shape)
    full = mask.all(-1, keepdim=True)
    y = torch.softmax(x.masked_fill(mask & ~full, float("-inf")), -1)
    return torch.where(full, torch.zeros_like(y), y)


def _mha(c, n, q, k, v, kpm=None):
    """torch.nn.MultiheadAttention (batch_first, dropout 0) with ngen's
    parameters; a query whose every key is masked outputs out_proj's bias
    (ngen's attention gives it zeros)."""
    heads = n["k"]
    e = q.shape[-1]
    b, tq, tk = q.shape[0], q.shape[1], k.shape[1]
    mask = torch.zeros(b, tq, tk, dtype=torch.bool)
    if n.get("str") == "causal":
        mask = mask | torch.ones(tq, tk, dtype=torch.bool).triu(1)
    if kpm is not None:
        mask = mask | (kpm != 0)[:, None, :]
    full = mask.all(-1, keepdim=True)
    mask = (mask & ~full).repeat_interleave(heads, 0)
    mod = nn.MultiheadAttention(e, heads, dropout=0.0, batch_first=True, dtype=c.dt)
    name = n["name"]
    params = {p: c.param(name + "." + p) for p in ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")}
    out, _ = torch.nn.utils.stateless.functional_call(mod, params, (q, k, v), {"attn_mask": mask, "need_weights": False})
    return torch.where(full, params["out_proj.bias"].expand_as(out), out)


def _pe(c, n, x):
    t = x.shape[1]
    pe = c.S[c.prefix + n["name"] + ".pe"]
    return c.dropout(x + pe[:t], n.get("f", 0))


def _recurrent(c, n, x, *rest):
    """torch.nn.RNN / LSTM written out step by step (the cell equations of
    the torch docs, gate order i, f, g, o), layer by layer; with a mask,
    a step where it is 0 keeps the state (and outputs it)."""
    lstm = n["op"] == "lstm"
    hidden, layers, bf, has_h0, has_mask = ints(n)
    rest = list(rest)
    h0 = c0 = mask = None
    if has_h0:
        h0 = rest.pop(0)
        if lstm:
            c0 = rest.pop(0)
    if has_mask:
        mask = rest.pop(0)
    if not bf:
        x = x.transpose(0, 1)
    b, t = x.shape[0], x.shape[1]
    act = torch.relu if n.get("str") == "relu" else torch.tanh
    name = n["name"]
    hns, cns = [], []
    h_in = x
    for l in range(layers):
        wih, whh = c.param("%s.weight_ih_l%d" % (name, l)), c.param("%s.weight_hh_l%d" % (name, l))
        bih, bhh = c.param("%s.bias_ih_l%d" % (name, l)), c.param("%s.bias_hh_l%d" % (name, l))
        h = h0[l] if h0 is not None else torch.zeros(b, hidden, dtype=x.dtype)
        cs = c0[l] if c0 is not None else torch.zeros(b, hidden, dtype=x.dtype)
        outs = []
        for s in range(t):
            a = h_in[:, s] @ wih.T + bih + h @ whh.T + bhh
            if lstm:
                i, f, g, o = a.chunk(4, 1)
                cn = torch.sigmoid(f) * cs + torch.sigmoid(i) * torch.tanh(g)
                hn = torch.sigmoid(o) * torch.tanh(cn)
            else:
                hn, cn = act(a), None
            if mask is not None:
                m = (mask[:, s:s + 1] != 0).to(x.dtype)
                hn = m * hn + (1 - m) * h
                if lstm:
                    cn = m * cn + (1 - m) * cs
            h = hn
            if lstm:
                cs = cn
            outs.append(h)
        h_in = torch.stack(outs, 1)
        hns.append(h)
        cns.append(cs)
    out = h_in if bf else h_in.transpose(0, 1)
    res = [out, torch.stack(hns, 0)]
    if lstm:
        res.append(torch.stack(cns, 0))
    return res


def _causal(t):
    return torch.ones(t, t, dtype=torch.bool).triu(1)


def _sub_params(c, prefix):
    full = c.prefix + prefix + "."
    return {k[len(full):]: v for k, v in c.P.items() if k.startswith(full)}


def _encoder_layer(c, n, x, kpm=None):
    heads, ff, norm_first, causal = ints(n)
    mod = nn.TransformerEncoderLayer(x.shape[-1], heads, ff, dropout=0.0, activation=n["str"], batch_first=True,
                                     norm_first=bool(norm_first), dtype=c.dt)
    kw = {"src_mask": _causal(x.shape[1]) if causal else None,
          "src_key_padding_mask": None if kpm is None else kpm != 0}
    return torch.nn.utils.stateless.functional_call(mod, _sub_params(c, n["name"]), (x,), kw)


def _decoder_layer(c, n, x, mem, kpm=None):
    heads, ff, norm_first, causal = ints(n)
    mod = nn.TransformerDecoderLayer(x.shape[-1], heads, ff, dropout=0.0, activation=n["str"], batch_first=True,
                                     norm_first=bool(norm_first), dtype=c.dt)
    kw = {"tgt_mask": _causal(x.shape[1]) if causal else None,
          "memory_key_padding_mask": None if kpm is None else kpm != 0}
    return torch.nn.utils.stateless.functional_call(mod, _sub_params(c, n["name"]), (x, mem), kw)


def _decoder_only(c, n, x):
    heads, ff = ints(n)
    mod = nn.TransformerEncoderLayer(x.shape[-1], heads, ff, dropout=0.0, activation="gelu", batch_first=True,
                                     norm_first=True, dtype=c.dt)
    return torch.nn.utils.stateless.functional_call(mod, _sub_params(c, n["name"]), (x,), {"src_mask": _causal(x.shape[1])})


def _transformer(c, n, src, tgt):
    heads, enc, dec, ff, norm_first, causal = ints(n)
    mod = nn.Transformer(src.shape[-1], heads, enc, dec, ff, dropout=0.0, activation=n["str"], batch_first=True,
                         norm_first=bool(norm_first), dtype=c.dt)
    kw = {"tgt_mask": _causal(tgt.shape[1]) if causal else None}
    return torch.nn.utils.stateless.functional_call(mod, _sub_params(c, n["name"]), (src, tgt), kw)


def _concat(c, n, *xs):
    return torch.cat(xs, ints(n)[0])


# One function per fuzzgen op: (ctx, node, *operands) -> result or list of results.
OPS = {
    "input": lambda c, n: _input(c, n),
    "labels": lambda c, n: _input(c, n),
    "tokens": lambda c, n: _input(c, n),
    "mask": lambda c, n: _input(c, n),
    "param": lambda c, n: c.param(n["name"]),
    "relu": lambda c, n, x: torch.relu(x),
    "sigmoid": lambda c, n, x: torch.sigmoid(x),
    "tanh": lambda c, n, x: torch.tanh(x),
    "gelu": lambda c, n, x: _ContiguousGrad.apply(F.gelu(x)),
    "exp": lambda c, n, x: torch.exp(x),
    "log": lambda c, n, x: torch.log(x),
    "sqrt": lambda c, n, x: torch.sqrt(x),
    "square": lambda c, n, x: torch.square(x),
    "abs": lambda c, n, x: torch.abs(x),
    "neg": lambda c, n, x: torch.neg(x),
    "scale": lambda c, n, x: x * n.get("f", 0),
    "addc": lambda c, n, x: x + n.get("f", 0),
    "powc": lambda c, n, x: torch.pow(x, n.get("f", 0)),
    "add": lambda c, n, x, y: x + y,
    "sub": lambda c, n, x, y: x - y,
    "mul": lambda c, n, x, y: x * y,
    "div": lambda c, n, x, y: x / y,
    "sum": _reduce(torch.sum),
    "mean": _reduce(torch.mean),
    "max": _reduce(torch.amax),
    "dropout": lambda c, n, x: c.dropout(x, n.get("f", 0)),
    "reshape": lambda c, n, x: x.reshape(c.shape(ints(n))),
    "flatten": lambda c, n, x: torch.flatten(x, 1),
    "permute": lambda c, n, x: x.permute(*ints(n)),
    "transpose": lambda c, n, x: x.transpose(*ints(n)),
    "slice": lambda c, n, x: torch.narrow(x, ints(n)[0], ints(n)[1], ints(n)[2] - ints(n)[1]),
    "select": lambda c, n, x: torch.select(x, ints(n)[0], ints(n)[1]),
    "concat": _concat,
    "stack": lambda c, n, *xs: torch.stack(xs, ints(n)[0]),
    "matmul": _matmul,
    "batch_matmul": _matmul,
    "linear": _linear,
    "conv2d": _conv2d,
    "maxpool": _maxpool,
    "avgpool": _avgpool,
    "batchnorm2d": _batchnorm,
    "embedding": lambda c, n, ids: F.embedding(ids, c.param(n["name"] + ".weight")),
    "embed": lambda c, n, w, ids: F.embedding(ids, w),
    "cross_entropy": _cross_entropy,
    "layernorm": _layernorm,
    "softmax": lambda c, n, x: torch.softmax(x, ints(n)[0]),
    "masked_softmax": _masked_softmax,
    "mha": _mha,
    "pe": _pe,
    "rnn": _recurrent,
    "lstm": _recurrent,
    "encoder_layer": _encoder_layer,
    "decoder_layer": _decoder_layer,
    "decoder_only": _decoder_only,
    "transformer": _transformer,
}


def forward(c):
    """Computes every node; returns the results, the loss and the
    output."""
    vals = []
    for i, n in enumerate(c.spec["nodes"]):
        c.index = i
        args = [vals[a["n"]][a.get("o", 0)] for a in n.get("args") or []]
        fn = OPS.get(n["op"])
        if fn is None:
            raise SystemExit("torch_fuzz.py: unknown op %r" % n["op"])
        r = fn(c, n, *args)
        vals.append(list(r) if isinstance(r, (list, tuple)) else [r])
    ref = lambda r: vals[r["n"]][r.get("o", 0)]
    return vals, ref(c.spec["loss"]), ref(c.spec["output"])


def tensor(t, dt):
    return torch.tensor(t["data"], dtype=dt).reshape(t["shape"])


def _num(v):
    # JSON has no NaN or infinities: they travel as strings, as in
    # torch_ops.py.
    if not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


def flat(t):
    return [_num(v) for v in t.detach().double().reshape(-1).tolist()]


def optimizer(req, params):
    o = req["opt"]
    kind, lr = o["kind"], o["lr"]
    wd = o.get("weight_decay", 0)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=o.get("momentum", 0), dampening=o.get("dampening", 0),
                               weight_decay=wd, nesterov=bool(o.get("nesterov")))
    betas = (o["beta1"], o["beta2"])
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=o["eps"], weight_decay=wd)
    return torch.optim.Adam(params, lr=lr, betas=betas, eps=o["eps"], weight_decay=wd)


def run_spec(req, spec):
    dt = FLOAT[req["dtype"]]
    P = {k: tensor(v, dt).requires_grad_(True) for k, v in spec["params"].items()}
    S = {k: tensor(v, dt) for k, v in spec["states"].items()}
    opt = optimizer(req, list(P.values())) if P else None
    res = {"loss": [], "grads": {}}
    for step in range(req["steps"]):
        c = Ctx(req, spec, P, S, spec["inputs"][step], spec["masks"][step], True)
        if opt:
            opt.zero_grad()
        vals, loss, _ = forward(c)
        if step == 0:
            res["shapes"] = [[list(v.shape) for v in vs] for vs in vals]
        if P and loss.requires_grad:
            # (A loss that no parameter reaches has no graph: every
            # gradient is 0, as ngen's.)
            loss.backward()
        res["loss"].append(_num(loss.item()))
        if step == 0:
            res["grads"] = {k: flat(p.grad if p.grad is not None else torch.zeros_like(p)) for k, p in P.items()}
        if opt:
            opt.step()
    res["params"] = {k: flat(p) for k, p in P.items()}
    res["states"] = {k: flat(s) for k, s in S.items()}
    with torch.no_grad():
        _, _, out = forward(Ctx(req, spec, P, S, spec["inputs"][0], spec["masks"][0], False))
    res["output"] = flat(out)
    return res


def main():
    req = json.load(sys.stdin)
    # The Transformer modules' LayerNorms call F.layer_norm: they get the
    # shifted form too, for this request only (the oracle server runs
    # other scripts in the same process).
    saved = F.layer_norm
    F.layer_norm = _shifted_layer_norm
    try:
        out = [run_spec(req, s) for s in req["specs"]]
    finally:
        F.layer_norm = saved
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
