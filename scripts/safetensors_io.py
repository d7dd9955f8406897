"""Read and write ngen checkpoints (safetensors) with Python's standard
library and numpy only: Debian ships no python3-safetensors.

The format is safetensors (an 8-byte little-endian header length, a JSON
header, the tensors' bytes back to back) with ngen's metadata: the step
count and learning rate, and "ngen.sha256", the SHA-256 of the whole file
with that value's 64 hex digits read as zeros. ngen's Load requires it;
write() computes it. Optimizer state is stored per parameter as
"__optimizer__.<param>.<key>" (key as in PyTorch's optimizer state:
exp_avg, exp_avg_sq, momentum_buffer).

    tensors, meta = read(path)            # name -> numpy array, metadata
    write(path, tensors, meta)            # tensors in the given order
    from_torch(model, optimizer)          # -> tensors, meta
    to_torch(tensors, meta, model, optimizer)
"""

import hashlib
import json
import struct

import numpy as np

SUM_KEY = "ngen.sha256"
OPT = "__optimizer__."
_DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "I64": np.int64}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def write(path, tensors, meta):
    meta = {str(k): str(v) for k, v in meta.items()}
    meta[SUM_KEY] = "0" * 64
    header, blobs, off = {"__metadata__": meta}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        b = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": _NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    out = bytearray(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    field = ('"%s":"%s"' % (SUM_KEY, "0" * 64)).encode()
    at = out.index(field) + len(field) - 65
    out[at:at + 64] = hashlib.sha256(bytes(out)).hexdigest().encode()
    with open(path, "wb") as f:
        f.write(out)


def read(path):
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    if n > 100 << 20 or n > len(b) - 8:
        raise ValueError("bad header length %d" % n)
    header = json.loads(b[8:8 + n])
    meta = header.pop("__metadata__", {})
    if SUM_KEY in meta:
        field = ('"%s":"%s"' % (SUM_KEY, meta[SUM_KEY])).encode()
        at = b.index(field, 8) + len(field) - 65
        z = bytearray(b)
        z[at:at + 64] = b"0" * 64
        if hashlib.sha256(bytes(z)).hexdigest() != meta[SUM_KEY]:
            raise ValueError("%s: SHA-256 mismatch" % path)
    data = b[8 + n:]
    out = {}
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        lo, hi = e["data_offsets"]
        out[name] = np.frombuffer(data[lo:hi], dtype=np.dtype(_DTYPES[e["dtype"]]).newbyteorder("<")).reshape(e["shape"]).copy()
    return out, meta


def from_torch(model, optimizer=None, lr=None):
    """A PyTorch model's state_dict (and Adam or SGD state) as ngen tensors."""
    import torch
    tensors = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    meta = {"format": "pt"}
    if optimizer is not None:
        names = {id(p): n for n, p in model.named_parameters()}
        step = 0
        for group in optimizer.param_groups:
            meta["ngen.lr"] = repr(float(group["lr"]))
            for p in group["params"]:
                st = optimizer.state.get(p, {})
                for key, v in st.items():
                    if key == "step":
                        step = int(v.item() if torch.is_tensor(v) else v)
                    elif torch.is_tensor(v):
                        tensors[OPT + names[id(p)] + "." + key] = v.detach().cpu().numpy()
        # PyTorch's SGD keeps no step count, but a momentum buffer exists
        # only after a step; ngen's SGD starts its buffer from the gradient
        # at step 0, so step 0 would drop the loaded momentum.
        if step == 0 and any(k.endswith(".momentum_buffer") for k in tensors):
            step = 1
        meta["ngen.step"] = str(step)
    return tensors, meta


def to_torch(tensors, meta, model, optimizer=None):
    """Loads ngen tensors into a PyTorch model (and its optimizer)."""
    import torch
    sd = model.state_dict()
    new = {}
    for k, v in sd.items():
        if k.endswith("num_batches_tracked"):
            new[k] = torch.tensor(int(meta.get("ngen.step", "0")), dtype=v.dtype)
        else:
            new[k] = torch.from_numpy(tensors[k]).to(v.dtype)
    model.load_state_dict(new)
    if optimizer is None:
        return
    step = int(meta.get("ngen.step", "0"))
    for group in optimizer.param_groups:
        if "ngen.lr" in meta:
            group["lr"] = float(meta["ngen.lr"])
    for n, p in model.named_parameters():
        st = {}
        for key in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
            if OPT + n + "." + key in tensors:
                st[key] = torch.from_numpy(tensors[OPT + n + "." + key]).to(p.dtype)
        if st:
            if isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
                st["step"] = torch.tensor(float(step))
            optimizer.state[p] = st
