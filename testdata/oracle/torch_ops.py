#!/usr/bin/python3
"""PyTorch oracle for single ngen ops.

Reads a JSON list of cases on stdin and writes a JSON list of results on
stdout; see README.md in this directory for the protocol. Run it with
/usr/bin/python3 (Debian's python3-torch). Go tests call it through
compiler/oracle.
"""

import json
import math
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)

FLOAT = {"f32": torch.float32, "f64": torch.float64}


class OracleError(Exception):
    pass


def _axes(attrs, ndim):
    axes = attrs.get("axes")
    if axes is None:
        return list(range(ndim))
    return list(axes)


def _reduce(fn):
    def op(attrs, x):
        axes = _axes(attrs, x.dim())
        keep = bool(attrs.get("keepdim", False))
        if not axes:  # reducing over nothing is the identity, as in the IR
            return x.clone()
        return fn(x, dim=axes, keepdim=keep)
    return op


def _matmul(attrs, a, b):
    if attrs.get("transa"):
        a = a.transpose(-1, -2)
    if attrs.get("transb"):
        b = b.transpose(-1, -2)
    return torch.matmul(a, b)


def _cross_entropy(attrs, logits, labels):
    """attrs: f is label_smoothing, ints (one value) ignore_index."""
    c = logits.shape[-1]
    ints = attrs.get("ints") or [-100]  # ngen ignores nothing without it: labels are never -100 then
    return F.cross_entropy(logits.reshape(-1, c), labels.reshape(-1).long(), reduction="mean",
                           label_smoothing=attrs.get("f", 0.0), ignore_index=ints[0])


def _window(attrs):
    kh, kw, sh, sw, ph, pw, dh, dw, g = attrs["ints"]
    return (kh, kw), (sh, sw), (ph, pw), (dh, dw), g


def _conv2d(attrs, x, w, b=None):
    _, s, p, d, g = _window(attrs)
    return F.conv2d(x, w, b, stride=s, padding=p, dilation=d, groups=g)


def _max_pool2d(attrs, x):
    k, s, p, d, _ = _window(attrs)
    return F.max_pool2d(x, k, stride=s, padding=p, dilation=d)


def _avgpool(attrs, x):
    k, s, p, _, _ = _window(attrs)
    return F.avg_pool2d(x, k, stride=s, padding=p, count_include_pad=True)


def _linear(attrs, x, w, b=None):
    return F.linear(x, w, b)


# One row per op: its PyTorch function of (attrs, *inputs).
def _batch_norm2d_steps(attrs, x1, x2, xe, w, b):
    """torch.nn.BatchNorm2d's buffers: training-mode passes over x1 and x2
    move running_mean and running_var (momentum 0.1, unbiased variance),
    then an eval-mode pass normalises xe with them. Returns running_mean,
    running_var and the eval output, flattened and concatenated."""
    c = x1.shape[1]
    rm = torch.zeros(c, dtype=x1.dtype)
    rv = torch.ones(c, dtype=x1.dtype)
    for x in (x1, x2):
        F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5)
    y = F.batch_norm(xe, rm, rv, w, b, training=False, eps=1e-5)
    return torch.cat([rm, rv, y.reshape(-1)])


def _recurrent(cell, x, wih, whh, bih, bhh, h0, c0=None):
    """One batch-first layer of torch.nn.RNN / torch.nn.LSTM (the same
    kernels those modules call) from [B,H] initial states: every step's
    output, then the final states, flattened and concatenated."""
    args = ([wih, whh, bih, bhh], True, 1, 0.0, False, False, True)
    if cell == "lstm":
        out, hn, cn = torch._VF.lstm(x, (h0[None], c0[None]), *args)
        return torch.cat([out.reshape(-1), hn.reshape(-1), cn.reshape(-1)])
    out, hn = getattr(torch._VF, cell)(x, h0[None], *args)
    return torch.cat([out.reshape(-1), hn.reshape(-1)])


def _masked(cell, x, wih, whh, bih, bhh, h0, *rest):
    """A layer written out step by step, where mask 0 keeps the state."""
    c, mask = (rest[0], rest[1]) if cell == "lstm" else (None, rest[0])
    m_all = (mask != 0).to(x.dtype)
    h, outs = h0, []
    for t in range(x.shape[1]):
        a = x[:, t] @ wih.T + bih + h @ whh.T + bhh
        m = m_all[:, t:t + 1]
        if cell == "lstm":
            i, f, g, o = a.chunk(4, 1)
            cn = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            hn = torch.sigmoid(o) * torch.tanh(cn)
            c = m * cn + (1 - m) * c
        else:
            hn = torch.relu(a)
        h = m * hn + (1 - m) * h
        outs.append(h)
    parts = [torch.stack(outs, 1).reshape(-1), h.reshape(-1)]
    if cell == "lstm":
        parts.append(c.reshape(-1))
    return torch.cat(parts)


def _softmax(attrs, x, kpm=None):
    """Softmax along one axis with ngen's masks: causal (element j of row i
    where j > i) and key padding (kpm [N, L] non-zero) along the last
    axis. A fully masked row is zeros by definition (PyTorch's is NaN):
    such rows are computed unmasked and then replaced, so no NaN reaches
    the gradient either."""
    axis = attrs["axes"][0]
    if attrs.get("str") != "causal" and kpm is None:
        return torch.softmax(x, axis)
    mask = torch.zeros(x.shape, dtype=torch.bool)
    if attrs.get("str") == "causal":
        q, k = x.shape[-2], x.shape[-1]
        mask = mask | torch.ones(q, k, dtype=torch.bool).triu(1)
    if kpm is not None:
        shape = [x.shape[0]] + [1] * (x.dim() - 2) + [x.shape[-1]]
        mask = mask | (kpm != 0).reshape(shape)
    full = mask.all(-1, keepdim=True)
    y = torch.softmax(x.masked_fill(mask & ~full, float("-inf")), -1)
    return torch.where(full, torch.zeros_like(y), y)


def _mha(attrs, query, key, in_w, in_b, out_w, out_b, kpm=None):
    """torch.nn.MultiheadAttention (batch_first, dropout 0) called with the
    given parameters; key is also the value. Masks as in _softmax; a
    query whose every key is masked outputs out_proj's bias (ngen's
    attention gives it zeros), PyTorch NaN: such rows run unmasked and
    are replaced."""
    heads = attrs["ints"][0]
    e = query.shape[-1]
    b, tq, tk = query.shape[0], query.shape[1], key.shape[1]
    mask = torch.zeros(b, tq, tk, dtype=torch.bool)
    if attrs.get("str") == "causal":
        mask = mask | torch.ones(tq, tk, dtype=torch.bool).triu(1)
    if kpm is not None:
        mask = mask | (kpm != 0)[:, None, :]
    full = mask.all(-1, keepdim=True)
    mask = (mask & ~full).repeat_interleave(heads, 0)
    mha = torch.nn.MultiheadAttention(e, heads, dropout=0.0, batch_first=True, dtype=query.dtype)
    params = {"in_proj_weight": in_w, "in_proj_bias": in_b, "out_proj.weight": out_w, "out_proj.bias": out_b}
    out, _ = torch.nn.utils.stateless.functional_call(
        mha, params, (query, key, key), {"attn_mask": mask, "need_weights": False})
    return torch.where(full, out_b.expand_as(out), out)


def _layernorm(attrs, *xs):
    """F.layer_norm over the last axis; with five operands the fused
    residual form LN(r + (h + b)) (dropout off)."""
    if len(xs) == 5:
        h, b, r, w, bias = xs
        x = r + (h + b)
    else:
        x, w, bias = xs
    return F.layer_norm(x, [x.shape[-1]], w, bias, attrs["f"])


def _zero_states(x, whh):
    z = torch.zeros(x.shape[0], whh.shape[1], dtype=x.dtype)
    return z, z


OPS = {
    "neg": lambda a, x: torch.neg(x),
    "copy": lambda a, x: x.clone(),
    "exp": lambda a, x: torch.exp(x),
    "log": lambda a, x: torch.log(x),
    "sqrt": lambda a, x: torch.sqrt(x),
    "square": lambda a, x: torch.square(x),
    "abs": lambda a, x: torch.abs(x),
    "relu": lambda a, x: torch.relu(x),
    "sigmoid": lambda a, x: torch.sigmoid(x),
    "tanh": lambda a, x: torch.tanh(x),
    "gelu": lambda a, x: F.gelu(x),
    "scale": lambda a, x: x * a["f"],
    "addc": lambda a, x: x + a["f"],
    "powc": lambda a, x: torch.pow(x, a["f"]),
    "add": lambda a, x, y: torch.add(x, y),
    "sub": lambda a, x, y: torch.sub(x, y),
    "mul": lambda a, x, y: torch.mul(x, y),
    "div": lambda a, x, y: torch.div(x, y),
    "sum": _reduce(torch.sum),
    "mean": _reduce(torch.mean),
    "max": _reduce(torch.amax),
    "matmul": _matmul,
    "reshape": lambda a, x: torch.reshape(x, list(a["shape"])),
    "broadcast": lambda a, x: torch.broadcast_to(x, list(a["shape"])),
    "cross_entropy": _cross_entropy,
    "linear": _linear,
    "conv2d": _conv2d,
    "max_pool2d": _max_pool2d,
    "avgpool": _avgpool,
    "relu_max_pool2d": lambda a, x: _max_pool2d(a, torch.relu(x)),
    "relu_avgpool": lambda a, x: _avgpool(a, torch.relu(x)),
    "relu_conv2d": lambda a, x, w, b: _conv2d(a, torch.relu(x), w, b),
    # The op tests run in training mode, where where_train is its first operand.
    "where_train": lambda a, x, y: x + 0 * y,
    "batch_norm2d": lambda a, x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-5),
    "batch_norm2d_steps": _batch_norm2d_steps,
    "embedding": lambda a, w, ids: F.embedding(ids.long(), w),
    "permute": lambda a, x: x.permute(*a["perm"]),
    "slice": lambda a, x: torch.narrow(x, a["axes"][0], a["ints"][0], a["ints"][1] - a["ints"][0]),
    "concat": lambda a, *xs: torch.cat(xs, a["axes"][0]),
    "batch_matmul": _matmul,
    "rnn_tanh": lambda a, *xs: _recurrent("rnn_tanh", *xs),
    "rnn_relu": lambda a, *xs: _recurrent("rnn_relu", *xs),
    "lstm": lambda a, *xs: _recurrent("lstm", *xs),
    "rnn_tanh_zero": lambda a, x, *w: _recurrent("rnn_tanh", x, *w, *_zero_states(x, w[1])),
    "lstm_zero": lambda a, x, *w: _recurrent("lstm", x, *w, *_zero_states(x, w[1])),
    "rnn_relu_masked": lambda a, *xs: _masked("rnn_relu", *xs),
    "lstm_masked": lambda a, *xs: _masked("lstm", *xs),
    "layernorm": lambda a, *xs: _layernorm(a, *xs),
    "softmax": _softmax,
    "mha_self": lambda a, x, *w: _mha(a, x, x, *w),
    "mha_cross": _mha,
}


def _tensor(spec, default_dtype, name):
    shape = list(spec.get("shape", []))
    dt = spec.get("dtype", default_dtype)
    if dt == "i32":
        torch_dt = torch.int32
    elif dt in FLOAT:
        torch_dt = FLOAT[dt]
    else:
        raise OracleError("%s: unknown dtype %r (want f32, f64 or i32)" % (name, dt))
    data = [_decode_num(v) for v in spec.get("data", [])]
    n = math.prod(shape)
    if len(data) != n:
        raise OracleError("%s: shape %s needs %d values, got %d" % (name, shape, n, len(data)))
    return torch.tensor(data, dtype=torch_dt).reshape(shape)


# JSON has no NaN or infinities, so both directions spell them as the strings
# "NaN", "Infinity" and "-Infinity", which strict JSON decoders (Go's) accept.
def _decode_num(v):
    return float(v) if isinstance(v, str) else v


def _encode_num(v):
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")
    return v


NAMES = {torch.float32: "f32", torch.float64: "f64", torch.int32: "i32", torch.int64: "i32"}


def _encode(t):
    t = t.detach()
    dt = NAMES.get(t.dtype, str(t.dtype))
    if t.is_floating_point():
        t = t.double()  # so that f32 values survive JSON exactly
    return {"shape": list(t.shape), "dtype": dt,
            "data": [_encode_num(v) for v in t.reshape(-1).tolist()]}


def run_case(i, case):
    op = case.get("op")
    if op not in OPS:
        raise OracleError("case %d: unknown op %r; known ops: %s" % (i, op, ", ".join(sorted(OPS))))
    attrs = case.get("attrs") or {}
    dtype = case.get("dtype", "f32")
    if dtype not in FLOAT:
        raise OracleError("case %d (%s): unknown dtype %r (want f32 or f64)" % (i, op, dtype))
    inputs = []
    for j, spec in enumerate(case.get("inputs", [])):
        t = _tensor(spec, dtype, "case %d (%s) input %d" % (i, op, j))
        if t.is_floating_point():
            t.requires_grad_(True)
        inputs.append(t)

    try:
        out = OPS[op](attrs, *inputs)
    except (RuntimeError, TypeError, KeyError, IndexError, ValueError) as e:
        raise OracleError("case %d (%s): %s: %s" % (i, op, type(e).__name__, e))

    grads = [None] * len(inputs)
    go = case.get("grad_output")
    if go is not None:
        g = _tensor(dict(go, dtype=dtype), dtype, "case %d (%s) grad_output" % (i, op))
        if list(g.shape) != list(out.shape):
            raise OracleError("case %d (%s): grad_output shape %s, output shape %s"
                              % (i, op, list(g.shape), list(out.shape)))
        diff = [t for t in inputs if t.requires_grad]
        if diff:
            # allow_unused: an input may not reach the output (e.g. reshape of
            # a zero-size tensor); its gradient is then zero, not missing.
            got = torch.autograd.grad((out * g).sum(), diff, allow_unused=True)
            it = iter(got)
            for j, t in enumerate(inputs):
                if t.requires_grad:
                    gj = next(it)
                    grads[j] = _encode(gj if gj is not None else torch.zeros_like(t))
    return {"output": _encode(out), "grads": grads}


def main():
    try:
        cases = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        sys.stderr.write("torch_ops.py: request is not JSON: %s\n" % e)
        return 1
    if not isinstance(cases, list):
        sys.stderr.write("torch_ops.py: request must be a JSON list of cases\n")
        return 1
    try:
        results = [run_case(i, c) for i, c in enumerate(cases)]
    except OracleError as e:
        sys.stderr.write("torch_ops.py: %s\n" % e)
        return 1
    json.dump(results, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
