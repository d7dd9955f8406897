"""Checkpoint interoperability with PyTorch (models/mlp/interop_test.go).

    ckpt_interop.py torch2ngen DIR   train the benchmark MLP two Adam steps
        in PyTorch on DIR/x.bin, DIR/y.bin; write DIR/torch.safetensors (with
        Adam's state), DIR/torch_logits.bin (eval logits) and, after a third
        step, DIR/torch_after.safetensors.
    ckpt_interop.py ngen2torch DIR   load DIR/ngen.safetensors (written by
        ngen) into PyTorch, check its logits against DIR/ngen_logits.bin,
        take one Adam step and check every parameter against
        DIR/ngen_after.safetensors.
    ckpt_interop.py bn_torch2ngen DIR   two training steps of the ConvNet
        with batch norm in PyTorch on DIR/img.bin, DIR/y.bin; write
        DIR/bn_torch.safetensors (conv1.weight, bn1.running_mean, ...,
        num_batches_tracked included) and its eval logits.
    ckpt_interop.py bn_ngen2torch DIR   load DIR/bn_ngen.safetensors into
        PyTorch's ConvNet (strict) and check its eval logits against
        DIR/bn_ngen_logits.bin.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))
import numpy as np
import safetensors_io as st
import torch

torch.set_num_threads(1)
IN = 1024
B = 16



class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(IN, 2048)
        self.fc2 = torch.nn.Linear(2048, 512)
        self.fc3 = torch.nn.Linear(512, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def data(d):
    x = torch.from_numpy(np.fromfile(os.path.join(d, "x.bin"), dtype="<f4").reshape(B, IN))
    y = torch.from_numpy(np.fromfile(os.path.join(d, "y.bin"), dtype="<i4").astype(np.int64))
    return x, y


def step(m, opt, x, y):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(m(x), y).backward()
    opt.step()


def convnet(mode, d):
    sys.path.insert(0, os.path.dirname(__file__))
    from torch_convnet import ConvNet
    x = torch.from_numpy(np.fromfile(os.path.join(d, "img.bin"), dtype="<f4").reshape(-1, 1, 28, 28))
    y = torch.from_numpy(np.fromfile(os.path.join(d, "y.bin"), dtype="<i4").astype(np.int64))[: x.shape[0]]
    torch.manual_seed(0)
    m = ConvNet(True)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    if mode == "bn_torch2ngen":
        m.train()
        step(m, opt, x, y)
        step(m, opt, x, y)
        t, meta = st.from_torch(m, opt)
        st.write(os.path.join(d, "bn_torch.safetensors"), t, meta)
        m.eval()
        with torch.no_grad():
            m(x).numpy().astype("<f4").tofile(os.path.join(d, "bn_torch_logits.bin"))
        return
    t, meta = st.read(os.path.join(d, "bn_ngen.safetensors"))
    st.to_torch(t, meta, m, opt)
    m.eval()
    with torch.no_grad():
        got = m(x).numpy()
    want = np.fromfile(os.path.join(d, "bn_ngen_logits.bin"), dtype="<f4").reshape(got.shape)
    # f32 convolutions summed in another order: rtol 1e-4.
    if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
        sys.exit("batch norm logits differ: max |diff| %g" % np.abs(got - want).max())
    print("ok")


def main(mode, d):
    if mode.startswith("bn_"):
        return convnet(mode, d)
    x, y = data(d)
    torch.manual_seed(0)
    m = MLP()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    if mode == "torch2ngen":
        step(m, opt, x, y)
        step(m, opt, x, y)
        t, meta = st.from_torch(m, opt)
        st.write(os.path.join(d, "torch.safetensors"), t, meta)
        with torch.no_grad():
            m(x).numpy().astype("<f4").tofile(os.path.join(d, "torch_logits.bin"))
        step(m, opt, x, y)
        t, meta = st.from_torch(m)
        st.write(os.path.join(d, "torch_after.safetensors"), t, meta)
        return
    t, meta = st.read(os.path.join(d, "ngen.safetensors"))
    st.to_torch(t, meta, m, opt)
    with torch.no_grad():
        got = m(x).numpy()
    want = np.fromfile(os.path.join(d, "ngen_logits.bin"), dtype="<f4").reshape(got.shape)
    # f32 GEMMs summed in another order: rtol 1e-4 on logits of size ~1.
    if not np.allclose(got, want, rtol=1e-4, atol=1e-5):
        sys.exit("logits differ: max |diff| %g" % np.abs(got - want).max())
    step(m, opt, x, y)
    after, _ = st.read(os.path.join(d, "ngen_after.safetensors"))
    for n, p in m.named_parameters():
        a, b = p.detach().numpy(), after[n]
        # One Adam step moves a weight by about lr = 1e-3; the two sides
        # agree on that move to a few ulps of the weight.
        if not np.allclose(a, b, rtol=1e-5, atol=1e-6):
            sys.exit("%s after a step differs: max |diff| %g" % (n, np.abs(a - b).max()))
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
