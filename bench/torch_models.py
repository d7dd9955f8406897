"""The seed models in PyTorch, shared by the peer scripts (torch_train.py,
torch_step.py). Each matches its ngen declaration in models/: layer sizes,
PyTorch's default initialisation, Adam(lr 1e-3) and cross-entropy.
"""


def mlp(layers, dropout=0.0):
    """Linear layers with ReLU (and dropout, when > 0) between them."""
    import torch.nn as nn
    mods = []
    for i in range(len(layers) - 1):
        mods.append(nn.Linear(layers[i], layers[i + 1]))
        if i < len(layers) - 2:
            mods.append(nn.ReLU())
            if dropout > 0:
                mods.append(nn.Dropout(dropout))
    return nn.Sequential(*mods)


def convnet(bn=False):
    """The seed ConvNet for 1x28x28 input (models/convnet): conv 32 3x3 pad 1,
    ReLU, maxpool 2, conv 64 3x3 pad 1, ReLU, maxpool 2, fc 128, ReLU, fc 10;
    with bn, BatchNorm2d after each conv."""
    import torch.nn as nn

    def block(cin, cout):
        mods = [nn.Conv2d(cin, cout, 3, padding=1)]
        if bn:
            mods.append(nn.BatchNorm2d(cout))
        return mods + [nn.ReLU(), nn.MaxPool2d(2)]

    return nn.Sequential(*block(1, 32), *block(32, 64), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def build(name, layers=None, dropout=0.0):
    """A model by the name ngen's train command uses, and its input shape
    per sample."""
    if name == "mlp":
        return mlp(layers or [784, 512, 256, 10], dropout), (layers or [784])[0:1]
    if name == "mlpbench":
        return mlp(layers or [1024, 2048, 512, 10]), [(layers or [1024])[0]]
    if name in ("convnet", "convnet_bn"):
        return convnet(bn=name == "convnet_bn"), [1, 28, 28]
    raise SystemExit("unknown model %r (have mlp, mlpbench, convnet, convnet_bn)" % name)


def seq_model(name, vocab):
    """The seed sequence models (models/rnn, models/lstm) as the training
    command runs them: (module, Adam learning rate).

    rnn: Embedding(vocab, 32) -> RNN(32, 128, tanh, batch_first) -> the last
    real step's hidden state -> Linear(128, 5). Words come left-padded with
    a 0/1 mask; ngen carries the state over padded steps, which from zero
    states equals running the real tokens only: here the words are packed
    (pack_padded_sequence) after moving the padding to the right.

    lstm: CharLM, Embedding(vocab, 32) -> LSTM(32, 128, num_layers=2,
    batch_first) -> Linear(128, vocab) at every position."""
    import torch
    import torch.nn as nn

    class RNNClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, 32)
            self.rnn = nn.RNN(32, 128, batch_first=True)
            self.fc = nn.Linear(128, 5)

        def forward(self, x, lengths):
            T = x.shape[1]
            # Left padding to right padding: row r's tokens start at T-len.
            idx = (torch.arange(T)[None, :] + (T - lengths)[:, None]) % T
            x = torch.gather(x, 1, idx)
            packed = nn.utils.rnn.pack_padded_sequence(self.emb(x), lengths.cpu(), batch_first=True, enforce_sorted=False)
            _, hn = self.rnn(packed)
            return self.fc(hn[-1])

    if name == "rnn":
        return RNNClassifier(), 1e-3
    if name == "lstm":
        return char_lm(vocab, 32, 128), 2e-3
    if name == "lstmbench":
        return char_lm(vocab, 128, 256), 2e-3
    if name in ("gpt", "transformer"):
        return transformer_lm(name, vocab), 3e-4
    raise SystemExit("unknown sequence model %r (have rnn, lstm, gpt, transformer)" % name)


def sinusoid_table(max_len, d, dtype=None):
    """The sinusoidal positional table [max_len, d] of the PyTorch tutorial,
    computed in dtype (default float32)."""
    import math
    import torch

    dtype = dtype or torch.float32
    pe = torch.zeros(max_len, d, dtype=dtype)
    pos = torch.arange(max_len, dtype=dtype).unsqueeze(1)
    div = torch.exp(torch.arange(0, d, 2, dtype=dtype) * (-math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


def transformer_lm(name, vocab, d=256, heads=4, ff=1024, dropout=0.1, max_len=512, layers=4, enc=2, dec=2):
    """The models of models/transformer, by default at their cmd/train sizes
    (testdata/oracle/torch_lm.py builds them small).

    gpt: Embedding(vocab, d, N(0, 0.02)) + sinusoidal positions, dropout,
    layers x TransformerEncoderLayer(gelu, norm_first, batch_first) with a causal
    mask, LayerNorm, logits through the embedding's transpose (tied).

    transformer: x is a window of 2T (cmd/train pairWindows): src its first
    T, tgt the rest. Embedding(vocab, d) * sqrt(d) + sinusoidal positions,
    dropout, nn.Transformer(d, heads, enc, dec, ff, dropout, batch_first) with a
    causal tgt_mask, Linear(d, vocab)."""
    import math
    import torch
    import torch.nn as nn

    pe = sinusoid_table(max_len, d)

    def causal(n, device):
        return torch.triu(torch.full((n, n), float("-inf"), device=device), 1)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_emb = nn.Embedding(vocab, d)
            nn.init.normal_(self.tok_emb.weight, 0, 0.02)
            self.register_buffer("pe", pe)
            self.drop = nn.Dropout(dropout)
            self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(d, heads, ff, dropout, activation="gelu",
                                                                    batch_first=True, norm_first=True) for _ in range(layers)])
            self.ln_f = nn.LayerNorm(d)

        def forward(self, x, lengths=None):
            T = x.shape[1]
            h = self.drop(self.tok_emb(x) + self.pe[:T])
            mask = causal(T, x.device)
            for b in self.blocks:
                h = b(h, src_mask=mask)
            return self.ln_f(h) @ self.tok_emb.weight.t()

    class TransformerLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = nn.Embedding(vocab, d)
            self.register_buffer("pe", pe)
            self.drop = nn.Dropout(dropout)
            self.transformer = nn.Transformer(d, heads, enc, dec, ff, dropout, batch_first=True)
            self.fc_out = nn.Linear(d, vocab)

        def forward(self, x, lengths=None):
            T = x.shape[1] // 2

            def embed(ids):
                return self.drop(self.embedding(ids) * math.sqrt(d) + self.pe[:T])

            h = self.transformer(embed(x[:, :T]), embed(x[:, T:]), tgt_mask=causal(T, x.device))
            return self.fc_out(h)

    return GPT() if name == "gpt" else TransformerLM()


def char_lm(vocab, emb, hidden):
    """CharLM of models/lstm: Embedding(vocab, emb) -> LSTM(emb, hidden,
    num_layers=2, batch_first) -> Linear(hidden, vocab) at every position."""
    import torch.nn as nn

    class CharLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, emb)
            self.lstm = nn.LSTM(emb, hidden, num_layers=2, batch_first=True)
            self.fc = nn.Linear(hidden, vocab)

        def forward(self, x, lengths=None):
            out, _ = self.lstm(self.emb(x))
            return self.fc(out)

    return CharLM()
